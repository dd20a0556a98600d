"""The files mojolearn writes: where a path really leads, atomic replacement, a run lock.

Every file the package or the CLI writes (checkpoints, loss histories, plots) goes through
`write_atomic`, which refuses before making anything when the path names something that is not
a regular file (a folder, a FIFO, a device such as /dev/null, a socket), follows a symlink to
the file it names (the link stays a link), keeps an existing file's permission bits (a new
file gets the umask's) and makes its temporary under a short name of fixed length, so a
target name of up to 255 bytes works.

Temporaries are `.<h>.<pid>.<random>.mojolearn-tmp` in the real target's folder, where `<h>` is
the first 8 hex digits of the SHA-256 of the target's file name: the next save to the same
target removes those left by dead processes (a `kill -9` mid-save) and no one else's.
"""

import errno
import hashlib
import os
import secrets
import stat as _stat

TMP_SUFFIX = ".mojolearn-tmp"
LOCK_SUFFIX = ".mojolearn-lock"


def fspath(path, what="checkpoint"):
    """`path` as a str (a bytes path decoded the way os does, surrogateescape)."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(
            f"{what}: path must be a str, bytes or os.PathLike, got {type(path).__name__}"
        ) from None
    return os.fsdecode(path)


def shown(path):
    """`path` as text that any output stream can print (undecodable bytes as \\xNN)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def kind(mode):
    """'a folder', 'a FIFO' ... of a non-regular file's `st_mode`."""
    for test, name in (
        (_stat.S_ISDIR, "a folder"),
        (_stat.S_ISFIFO, "a FIFO"),
        (_stat.S_ISCHR, "a character device"),
        (_stat.S_ISBLK, "a block device"),
        (_stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "an unknown kind of file"


def resolve(path, what="checkpoint"):
    """(real path, its stat or None when absent) of a file about to be written. ValueError,
    naming the path, when it exists and is not a regular file (symlinks followed) or is
    empty; the OSError the system gives when it cannot be looked at (a loop, a permission)."""
    path = fspath(path, what)
    if not path:
        raise ValueError(f"{what}: the path is empty")
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real, None
    if not _stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what}: {shown(path)!r} is {kind(st.st_mode)}, not a regular file")
    return real, st


def retry(fn, *args):
    """`fn(*args)`, again after EINTR (CPython retries most calls itself, PEP 475; a signal
    handler or an injected fault can still surface InterruptedError)."""
    while True:
        try:
            return fn(*args)
        except InterruptedError:
            continue


def write_all(fd, data):
    view = memoryview(data)
    while view:
        n = retry(os.write, fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[n:]


def read_at_most(fd, bound):
    """Up to `bound` + 1 bytes from `fd` (one more than allowed tells the caller it was over),
    in chunks of at most 16 MiB: the bound holds however the file grows meanwhile."""
    chunks, size = [], 0
    while size <= bound:
        chunk = os.read(fd, min(1 << 24, bound + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _tag(real):
    return hashlib.sha256(os.fsencode(os.path.basename(real))).hexdigest()[:8]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def temporary_name(path, pid, token):
    """The name of a temporary for `path` made by process `pid` (`token`: 12 hex digits)."""
    return f".{_tag(os.path.realpath(fspath(path)))}.{pid}.{token}{TMP_SUFFIX}"


def clean_stale_temporaries(path):
    """Remove the temporaries of `path` left by processes that no longer run (a save killed
    between creating its temporary and the replace). Returns the names removed."""
    real = os.path.realpath(fspath(path))
    folder = os.path.dirname(real)
    prefix = f".{_tag(real)}."
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(prefix) and name.endswith(TMP_SUFFIX)):
            continue
        middle = name[len(prefix) : -len(TMP_SUFFIX)].split(".")
        if len(middle) != 2 or not middle[0].isdigit():
            continue
        pid = int(middle[0])
        if pid == os.getpid() or _pid_alive(pid):
            continue  # a save in progress (another thread, or another live process)
        try:
            os.unlink(os.path.join(folder, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def write_atomic(path, data, what="checkpoint"):
    """Write `data` to the file `path` leads to, atomically: temporary in the same folder,
    fsync, replace, fsync of the folder. Refused (ValueError) before anything is made when the
    path names a non-regular file, FileNotFoundError naming the folder when it does not
    exist. On failure before the replace the old file is untouched and
    no temporary is left; a failure of the folder fsync (after the replace) raises with the new
    file in place. Stale temporaries of dead processes are removed first."""
    real, st = resolve(path, what)
    folder = os.path.dirname(real)
    clean_stale_temporaries(real)
    tmp = os.path.join(folder, temporary_name(real, os.getpid(), secrets.token_hex(6)))
    try:
        fd = retry(
            os.open, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666
        )
    except FileNotFoundError:
        raise _missing_folder(path, folder, what) from None
    try:
        try:
            if st is not None:
                _keep_mode(fd, st)
            write_all(fd, data)
            retry(os.fsync, fd)
        finally:
            os.close(fd)  # a failed close (EIO on some file systems) still frees fd
        retry(os.replace, tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_folder(folder)


def _missing_folder(path, real_folder, what):
    """The FileNotFoundError of a save into a folder that does not exist: it names the folder
    the caller gave (the temporary's name is ours, not theirs)."""
    given = os.path.dirname(fspath(path, what)) or real_folder
    return FileNotFoundError(
        errno.ENOENT,
        f"{what}: cannot write {shown(fspath(path, what))!r}: its folder does not exist",
        shown(given),
    )


def _keep_mode(fd, st):
    """The replaced file's permission bits (and owner, where we may set it) on the new one."""
    if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except OSError:  # not ours to give away: the bits below still apply
            pass
    os.fchmod(fd, _stat.S_IMODE(st.st_mode))


def fsync_folder(folder):
    try:
        dfd = retry(os.open, folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # some platforms cannot open folders; the rename is done already
        return
    try:
        retry(os.fsync, dfd)
    finally:
        os.close(dfd)


class Busy(Exception):
    """Another process holds the run lock of this path."""


class RunLock:
    """An advisory lock (flock) on a target path for as long as a run writes it: a second
    process asking for the same real path gets `Busy`. The lock file `.<h>.mojolearn-lock`
    sits beside the real target and is removed on release; a lock taken on a file that was
    removed meanwhile is retried, so two holders can never both believe they own it."""

    def __init__(self, path, what="checkpoint"):
        import fcntl

        real, _ = resolve(path, what)
        self.path = os.path.join(os.path.dirname(real), f".{_tag(real)}{LOCK_SUFFIX}")
        while True:
            fd = os.open(
                self.path,
                os.O_RDWR
                | os.O_CREAT
                | os.O_NOFOLLOW
                | os.O_NONBLOCK
                | getattr(os, "O_CLOEXEC", 0),
                0o600,
            )
            try:
                if not _stat.S_ISREG(os.fstat(fd).st_mode):
                    raise ValueError(
                        f"{what}: the lock file {shown(self.path)!r} is not a regular file"
                    )
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise Busy(shown(path)) from None
                try:
                    same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self._fd = fd
                return
            os.close(fd)  # the holder before us removed it as we opened it: take a new one

    def release(self):
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False
