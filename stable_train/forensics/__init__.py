"""Forensics: where a non-finite value came from (op, layer, variable), the Forensics policy,
activations."""
