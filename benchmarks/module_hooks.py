"""Code a benchmark's child process runs before the CLI: a meta path finder that calls
`HOOKS[name](module)` right after a module named in HOOKS has loaded, so a function wrapped
there is the one every later `from module import name` gets, and the code runs unchanged.
Used by benchmarks/fixed_cost.py (phase stamps) and benchmarks/page_faults.py (fault counts);
the child's own code defines HOOKS before this part."""

FINDER = r"""
import importlib.abc, importlib.machinery, sys
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in HOOKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, hook = spec.loader, HOOKS[name]
        class Loader(importlib.abc.Loader):
            def create_module(self, s):
                return loader.create_module(s)
            def exec_module(self, module):
                loader.exec_module(module)
                hook(module)
        spec.loader = Loader()
        return spec
sys.meta_path.insert(0, Finder())
"""
