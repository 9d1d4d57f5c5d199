"""The host runtime: the controller's loop, dispatch, records, evaluation, input, strategies,
actions."""
