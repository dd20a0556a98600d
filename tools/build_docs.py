"""The pdoc step of tools/build_docs.sh: HTML for the public modules into OUTDIR; any pdoc
warning fails the build.

    python tools/build_docs.py OUTDIR
"""

import functools
import sys
import warnings
from pathlib import Path

import pdoc
import pdoc.doc
import pdoc.render

# mojolearn documents the names of its __all__ (Array, MLPTrainer, ...) and the submodules
# listed there (training, nn); distributed is not in it, so it is named here.
MODULES = ("mojolearn", "mojolearn.distributed")
DOCUMENTED = {"mojolearn", "mojolearn.training", "mojolearn.distributed", "mojolearn.nn"}

_own_members = pdoc.doc.Class.own_members.func


def _with_undocumented_bases(cls):
    """A class's own members plus those it inherits from classes of undocumented modules
    (optim._Optimizer and its _optim mixins, _mlp_core.MLPCore, schedules._Schedule): they are
    its API, and pdoc would show nothing of them (it lists inherited members of documented
    modules only)."""
    members = list(_own_members(cls))
    for (module, _), inherited in cls.inherited_members.items():
        if module not in DOCUMENTED:
            members += [m for m in inherited if m not in members]
    return members


def main(out):
    pdoc.doc.Class.own_members = functools.cached_property(_with_undocumented_bases)
    pdoc.doc.Class.own_members.__set_name__(pdoc.doc.Class, "own_members")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.render.configure(docformat="google")
        pdoc.pdoc(*MODULES, output_directory=Path(out))
    for w in caught:
        print(f"pdoc: {w.category.__name__}: {w.message}", file=sys.stderr)
    if caught:
        return f"pdoc: {len(caught)} warnings"
    print(f"API reference: {out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
