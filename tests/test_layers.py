"""The package's layers: every import runs down the layers, none closes a circle, and nothing in
the library imports its testing tools. Parsed from the source (imports anywhere in a file count,
function-level ones too), so it needs no TensorFlow."""

import ast
import os
import unittest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'stable_train')

# Bottom to top. A module may import its own layer's modules and any lower layer's; two layers of
# the same rank are independent of each other. The package's `__init__` (the public names, loaded
# lazily) stands above every layer.
LAYERS = {
    'errors': 0, 'compat': 0,
    'runfiles': 1, 'doctor': 1, 'zoo': 1,
    'core': 2,
    'forensics': 3,
    'policies': 4,
    'runtime': 5,
    'trainer': 6,
    'keras': 7,
    'app': 8, 'own_loop': 8,
    'testing': 9,
}


def _modules():
  """{dotted module name: file path} under the package."""
  out = {}
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, '.')
        out[rel[:-len('.__init__')] if rel.endswith('.__init__') else rel] = path
  return out


def _lazy_names():
  """{public name: its module under stable_train}, read from the package's `_LAZY` table."""
  tree = ast.parse(open(os.path.join(PACKAGE, '__init__.py')).read())
  for node in tree.body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', None) == '_LAZY':
      return {k: f'stable_train.{v}' for k, v in ast.literal_eval(node.value).items()}
  raise AssertionError('stable_train/__init__.py has no _LAZY table')


def _imports(source, lazy):
  """Every stable_train module an import statement in `source` reaches, a public name through
  the module that defines it; a bare `import stable_train` as the package itself."""
  names = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      names.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      if node.module != 'stable_train':  # `from stable_train import x` imports x.
        names.add(node.module)
      names.update(lazy.get(a.name, f'{node.module}.{a.name}') if node.module == 'stable_train'
                   else f'{node.module}.{a.name}' for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level:
      raise AssertionError('a relative import; the package uses absolute imports')
  return {n for n in names if n == 'stable_train' or n.startswith('stable_train.')}


def _layer(module):
  """The layer (top-level name under stable_train) of a module, or None for the package."""
  parts = module.split('.')
  return parts[1] if len(parts) > 1 else None


def _edges(sources, lazy):
  """{module: the modules it imports} from {module: its source}. The package itself counts as an
  import of everything: a library module that imports it reaches any layer by attribute."""
  edges = {}
  for module, source in sources.items():
    targets = {t for t in _imports(source, lazy) if t in sources}
    edges[module] = {t for t in targets  # A parent package (not the root) comes with it.
                     if t != module and (t == 'stable_train' or not module.startswith(t + '.'))}
  return edges


def _upward(edges):
  """'a -> b' for each import of a module in another layer that is not below: the package itself
  (rank above every layer) included."""
  up = []
  for module, targets in edges.items():
    if module == 'stable_train':
      continue
    for target in targets:
      mine, theirs = _layer(module), _layer(target)
      if theirs is None or (mine != theirs and LAYERS[theirs] >= LAYERS[mine]):
        up.append(f'{module} -> {target}')
  return sorted(up)


class LayersTest(unittest.TestCase):

  @classmethod
  def setUpClass(cls):
    cls.modules = _modules()
    cls.edges = _edges({m: open(p).read() for m, p in cls.modules.items()}, _lazy_names())

  def test_every_module_belongs_to_a_layer(self):
    unplaced = sorted(m for m in self.modules if m != 'stable_train' and _layer(m) not in LAYERS)
    self.assertEqual(unplaced, [], 'add the new folder or module to LAYERS')

  def test_imports_run_down_the_layers(self):
    self.assertEqual(_upward(self.edges), [])

  def test_no_import_circle(self):
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
      index[v] = low[v] = len(index)
      stack.append(v)
      on_stack.add(v)
      for w in self.edges[v]:
        if w not in index:
          visit(w)
          low[v] = min(low[v], low[w])
        elif w in on_stack:
          low[v] = min(low[v], index[w])
      if low[v] == index[v]:
        component = []
        while True:
          w = stack.pop()
          on_stack.discard(w)
          component.append(w)
          if w == v:
            break
        if len(component) > 1:
          circles.append(sorted(component))

    for v in self.edges:
      if v not in index:
        visit(v)
    self.assertEqual(circles, [])

  def test_the_library_never_imports_its_testing_tools(self):
    offenders = sorted(m for m, targets in self.edges.items()
                       if _layer(m) != 'testing' and m != 'stable_train'
                       and any(_layer(t) == 'testing' for t in targets))
    self.assertEqual(offenders, [])

  def test_the_checker_sees_upward_imports_in_every_form(self):
    lazy = _lazy_names()
    sources = {m: '' for m in ('stable_train', 'stable_train.core.step', 'stable_train.app.cli',
                               'stable_train.testing.faults', 'stable_train.trainer.trainer')}
    for line, target in (('from stable_train.app import cli', 'stable_train.app.cli'),
                         ('import stable_train.app.cli', 'stable_train.app.cli'),
                         ('from stable_train import Faults', 'stable_train.testing.faults'),
                         ('from stable_train import Trainer', 'stable_train.trainer.trainer'),
                         ('import stable_train', 'stable_train')):
      with self.subTest(line=line):
        edges = _edges(dict(sources, **{'stable_train.core.step': f'def f():\n  {line}\n'}),
                       lazy)
        self.assertEqual(_upward(edges), [f'stable_train.core.step -> {target}'])
    self.assertIn('stable_train.core.reports', self.edges['stable_train.core.step'])  # Real ones.


if __name__ == '__main__':
  unittest.main()


class MovedModulesTest(unittest.TestCase):

  def test_modules_from_before_the_layers_still_import_from_the_top(self):
    # ../shared/bench/perf.py imports `from stable_train import events, models`.
    from stable_train import data, events, models  # pylint: disable=g-import-not-at-top
    from stable_train.runfiles import events as runfiles_events  # pylint: disable=g-import-not-at-top
    self.assertIs(events, runfiles_events)
    self.assertEqual((models.__name__, data.__name__),
                     ('stable_train.zoo.models', 'stable_train.zoo.data'))
