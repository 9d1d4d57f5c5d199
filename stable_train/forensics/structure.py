"""How a forensics record stores a batch's nest structure: a JSON description (`encode`) and the
template rebuilt from it (`decode`)."""

import collections
from typing import Any

from stable_train import compat


def encode(value) -> Any:
  """A JSON description of a nest structure (dicts, lists, tuples, namedtuples; anything else
  is a leaf)."""
  if isinstance(value, dict):
    return {'dict': {str(k): encode(value[k]) for k in sorted(value)}}
  fields = compat.namedtuple_fields(value)
  if fields is not None:
    return {'namedtuple': type(value).__name__,
            'fields': {f: encode(getattr(value, f)) for f in fields},
            'order': list(fields)}
  if isinstance(value, (list, tuple)):
    return {type(value).__name__: [encode(v) for v in value]}
  return None


def decode(spec) -> Any:
  """A template with the structure `encode` described (leaves are 0)."""
  if spec is None:
    return 0
  if 'dict' in spec:
    return {k: decode(v) for k, v in spec['dict'].items()}
  if 'namedtuple' in spec:  # Rebuilt as a namedtuple of the same name and fields.
    cls = collections.namedtuple(spec['namedtuple'], spec['order'])
    return cls(*[decode(spec['fields'][f]) for f in spec['order']])
  if 'list' in spec:
    return [decode(v) for v in spec['list']]
  return tuple(decode(v) for v in spec['tuple'])
