"""The `model.fit` front door: the guard that replaces Keras's train step, its callback and run
handle."""
