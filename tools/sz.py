"""Lines of code per wing: the package (python/mojolearn) and the kernels (mojo/).

Counts non-blank lines that are not comments and not docstrings (tinygrad's sz.py idea), so a
budget forbids bloat, not explanation. `--check` exits 1 when a wing is over its budget.

    python tools/sz.py            the table
    python tools/sz.py --check    the table, then fail above BUDGET
"""

from __future__ import annotations

import ast
import io
import pathlib
import sys
import tokenize

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "python" / "mojolearn"
# Set after the cut into wings (issue 28), with room for the open issues' features; raising one is
# a decision to write down in the commit that does it.
BUDGET = {
    "mojolearn (public modules)": 2800,  # 2400 until issue 36 (mojolearn.sklearn: the scikit-learn estimators); 2700 until issue 38 (mojolearn.TextData: about 240 lines)
    "mojolearn/_buffers": 1450,  # 1400 until issue 39 (ResultBuffers: a step's result buffer reused once unreferenced)
    "mojolearn/_runtime": 950,  # 900 until issue 39 (the default thread count and where it came from)
    "mojolearn/_mlp": 2575,  # 2400 until issue 34 (save-side load check, overflow rows), issue 35 (the port for DataParallel of a Trainer), issue 36 (float64 intake, preprocessing hooks); shrinks as the MLP moves onto _model
    "mojolearn/_optim": 600,
    "mojolearn/_model": 2800,  # the model engine (issue 35; 2400 until the image layers of issue 37 and the text layers of issue 38): the MLP wing moves here as it becomes a case of it
    "mojolearn/cli": 3300,  # 2700 until issue 38 (train --text: the gpt SPEC, text runs with their evaluation and resume checks, `mojolearn sample`: about 565 lines); 2600 until issue 37 (conv/maxpool/avgpool SPECs on shapes, --image-shape: about 85 lines); 1900 at the cut; --schedule, --warmup, issue 34 (outputs vs inputs, header by name, .best resume), issue 35 (--model SPEC grammar, --loss mse), issue 36 (numeric targets, outputs vs classes, resume finds its CSV and end, --test-fraction, CSV hints)
    "mojo/training": 5700,  # 5650 until the fourteenth round of issue 39 (an unpadded x read in place by the pooled dW, a masking pool's backward folded into the conv's dX: about 25 lines net); 5500 until the thirteenth round of issue 39 (a conv's dW from its masking pool's picks, conv_pooled.mojo, which replaced the dense kernel's windows: about 140 lines net); 5460 until the twelfth round of issue 39 (a transposed op(A) packed once a thread for its column claims: about 40 lines); 5425 until the eleventh round of issue 39 (op(A) read in place by the GEMM tile, column claims, a stride-1 conv's dW and dX in one task: about 35 lines); 5300 until the tenth round of issue 39 (a GEMM's rows claimed block of op(B) by block, the cross-entropy's rows in parts: about 110 lines); 5250 until the seventh round of issue 39 (a shared GEMM's claims from both ends, a conv dW's dY channel-last straight from the pool's places: about 50 lines); 5200 until the sixth round of issue 39 (bias-gradient sums, residual sums and gradient copies in parts on the pool: about 50 lines); 5150 until the fifth round of issues 37 and 39 (a 2 x 2 max pool's window places, its backward folded into the conv's dW and its forward into the conv's: about 40 lines net); 5000 until the fourth rounds of issues 37-39 (a masked pool's mask, conv dW laid out per example, masked row tails, four-panel A packs, a Linear's two products side by side, the shared input check: about 100 lines net); 4900 until issue 38's third round (attention's queries in lanes, LayerNorm by transposes, vector ReLU and copies: about 100 lines); 4700 until the second rounds of issues 37 and 39 (2 x 2 max pools in vectors, conv channels in lanes, dY channel-last by transposes, LayerNorm dw in registers: about 250 lines); 4400 until issue 39 (every layer's parts on the worker pool: convolutions, pools, attention, GELU, LayerNorm; attention's direct kernels: about 300 lines); 3200 until the model engine (issue 35)
    "mojo/bindings": 2150,  # 2000 until issues 37-38 (the program checker of the image and text ops)
}


def python_lines(path: pathlib.Path) -> int:
    source = path.read_text(encoding="utf-8")
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                doc_lines.update(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        code_lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(code_lines - doc_lines)


def mojo_lines(path: pathlib.Path) -> int:
    count, in_doc = 0, False
    for line in path.read_text(encoding="utf-8").splitlines():
        s = line.strip()
        if s.count('"""') == 1:
            in_doc = not in_doc
            continue
        if in_doc or not s or s.startswith("#") or (s.startswith('"""') and s.endswith('"""')):
            continue
        count += 1
    return count


def wings() -> dict[str, int]:
    sizes: dict[str, int] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        wing = f"mojolearn/{rel.parts[0]}" if len(rel.parts) > 1 else "mojolearn (public modules)"
        sizes[wing] = sizes.get(wing, 0) + python_lines(path)
    for folder in ("training", "bindings"):
        total = sum(mojo_lines(p) for p in sorted((ROOT / "mojo" / folder).rglob("*.mojo")))
        sizes[f"mojo/{folder}"] = total
    return sizes


def main(argv: list[str]) -> int:
    sizes = wings()
    over = []
    print(f"{'wing':<30} {'lines':>7} {'budget':>7}")
    for wing, n in sizes.items():
        budget = BUDGET.get(wing)
        print(f"{wing:<30} {n:>7} {budget if budget is not None else '-':>7}")
        if budget is None or n > budget:
            over.append(wing)
    print(f"{'total':<30} {sum(sizes.values()):>7}")
    if "--check" in argv and over:
        print("over budget (or no budget set): " + ", ".join(over))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
