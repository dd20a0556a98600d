"""The `mojolearn` command line: `train`, `predict`, `sample`, `info`, `verify`.

`mojolearn train` trains an MLP (the 8→16→3 network by default, any sizes with `--layers`) on
the bundled wine data (or `--dataset digits`, or `--data CSV`) with a seeded, recorded data
order, checkpoints every minute of training (or every `--checkpoint-every` steps), at the end
and on Ctrl-C, and resumes (`--resume`, every recorded option restored) to exactly the bytes
of an uninterrupted run; `--val-fraction` and `--patience` validate and
stop early; `--text [FILE]` trains a character-level gpt (`--model gpt:layers=4,heads=4,
embd=128,block=64`, the defaults) on a UTF-8 text, the shipped one without FILE.
`mojolearn predict` applies a train checkpoint to raw CSV rows, `mojolearn sample` generates
text with a `--text` checkpoint. Exit codes:
0 success, 1 `verify` found the file invalid, 2 bad input (one line on stderr, nothing
written) or a run that diverged (the last checkpoint kept), 130 interrupted by Ctrl-C / 143 by
SIGTERM (checkpoint saved in both cases).
"""

import sys

from .parser import build_parser
from .progress import printable
from .resume import check_environment
from .run import Group

# The exit codes and UsageError are the package's API (the commands take them from .usage).
from .usage import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, UsageError  # noqa: F401


def main(argv=None):
    """Run the command line `argv` (default: sys.argv[1:]); the exit code."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv
    out = sys.stdout
    try:
        check_environment()  # a bad MOJOLEARN_* setting is one line for every command
        return args.func(args, out)
    except UsageError as exc:
        if not Group.quiet:  # under mpiexec, one line from rank 0 (every rank refused the same)
            print(printable(f"mojolearn {args.command}: error: {exc}", sys.stderr), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"mojolearn {args.command}: interrupted", file=sys.stderr)
        Group.end(EXIT_INTERRUPTED)  # under mpiexec: the other processes end too
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
