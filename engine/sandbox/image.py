"""The Docker sandbox's runtime image, built locally with no registry.

``python -m engine.sandbox.image build [--rebuild]``:

1. debootstrap a minimal Debian root (``docker/sandbox/debian-packages.txt``: python3 and
   libseccomp on top of ``--variant=minbase``),
2. install ``docker/sandbox/requirements.txt`` into its ``/usr/local`` with the *host's* pip
   (``--target``), so the machine's wheel folder and pip constraints apply (the CPU torch),
3. ``docker import`` that root as ``trellis-sandbox-base:<tag>``,
4. ``docker build`` ``docker/sandbox/Dockerfile`` on top of it: ``trellis-sandbox:<tag>``.

The tag is a hash of ``docker/sandbox``'s files (and of this recipe's own version), so an image
is built once per definition: a second ``build`` with nothing changed returns at once, and a
changed requirements file gets a new tag that the executor then asks for.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from ..errors import TrellisError

DEFINITION_DIR = Path(__file__).resolve().parents[2] / "docker" / "sandbox"
REPOSITORY = "trellis-sandbox"
BASE_REPOSITORY = "trellis-sandbox-base"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Bump when the steps below change in a way the files of docker/sandbox do not show.
RECIPE_VERSION = "1"
# Where the host's pip puts the packages: on the image python's sys.path (Debian's python3
# reads /usr/local/lib/python3.X/dist-packages), under a tree the bootstrap lets programs read.
SITE_TEMPLATE = "usr/local/lib/python{version}/dist-packages"
BASE_FILES = ("debian-packages.txt", "requirements.txt")


class ImageError(TrellisError):
    """The runtime image cannot be built or found; the message names the fix."""


def definition_files(folder: Path = DEFINITION_DIR) -> list[Path]:
    """The files that define the image, in a stable order."""
    if not folder.is_dir():
        raise ImageError(f"the sandbox image's definition {folder} is missing")
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def definition_tag(folder: Path = DEFINITION_DIR, only: tuple[str, ...] | None = None) -> str:
    """A short hash of docker/sandbox's files (names and bytes; ``only`` those names) and of the
    recipe."""
    digest = hashlib.sha256(f"recipe {RECIPE_VERSION} {SUITE}\n".encode())
    for path in definition_files(folder):
        name = path.relative_to(folder).as_posix()
        if only is None or name in only:
            digest.update(name.encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def image_ref(folder: Path = DEFINITION_DIR) -> str:
    """The name the executor runs: ``trellis-sandbox:<tag of the current definition>``."""
    return f"{REPOSITORY}:{definition_tag(folder)}"


BUILD_HINT = "python -m engine.sandbox.image build"


def docker_client(timeout: float = 10):
    """A client of the local daemon (DOCKER_HOST or the default socket), or ImageError saying
    how to get one."""
    try:
        import docker
    except ImportError:  # pragma: no cover - docker is in requirements.txt
        docker = None
    if not hasattr(docker, "from_env"):  # absent, or only the project's docker/ folder found in its place
        raise ImageError("the docker Python package is missing: pip install -r requirements.txt")
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - docker raises several kinds; each means "no daemon"
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise ImageError(f"no Docker daemon answers at {where} ({_first_line(exc)}): start one "
                         "(`dockerd &` as root, or `systemctl start docker`)") from exc
    return client


def image_present(client, ref: str) -> bool:
    import docker

    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _read_list(path: Path) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def _check_can_build() -> None:
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise ImageError("building the sandbox image debootstraps a Debian root, which needs root: "
                         f"run `sudo {sys.executable} -m engine.sandbox.image build`")


def _run(cmd: list[str], out: TextIO, what: str) -> None:
    out.write(f"image: {what}\n")
    out.flush()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise ImageError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _image_python(rootfs: Path) -> str:
    """The X.Y of the root's python3 (from its stdlib folder, without running it)."""
    versions = sorted(p.name[len("python"):] for p in (rootfs / "usr" / "lib").glob("python3.*")
                      if (p / "os.py").exists())
    if not versions:
        raise ImageError(f"the debootstrapped root {rootfs} has no python3")
    return versions[-1]


def _install_requirements(rootfs: Path, folder: Path, out: TextIO) -> None:
    version = _image_python(rootfs)
    target = rootfs / SITE_TEMPLATE.format(version=version)
    target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-warn-conflicts",
           "--no-warn-script-location", "--target", str(target), "-r", str(folder / "requirements.txt")]
    host = f"{sys.version_info.major}.{sys.version_info.minor}"
    if version != host:
        # wheels for the image's interpreter, not the host's
        cmd[4:4] = ["--python-version", version, "--only-binary=:all:"]
    _run(cmd, out, f"pip install -r {folder / 'requirements.txt'} into the root's python{version}")
    shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts naming the host's python


def _debootstrap(rootfs: Path, folder: Path, mirror: str, out: TextIO) -> None:
    packages = _read_list(folder / "debian-packages.txt")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(rootfs), mirror],
         out, f"debootstrap {SUITE} ({', '.join(packages)}) from {mirror}")
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        path = rootfs / junk
        if path.is_dir():
            for child in path.iterdir():
                if child.is_file() or child.is_symlink():
                    child.unlink()
                else:
                    shutil.rmtree(child, ignore_errors=True)


def _unmount_under(folder: Path) -> None:
    prefix = str(folder.resolve()) + "/"
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _import_root(client, rootfs: Path, ref: str, work: Path, out: TextIO) -> None:
    tarball = work / "rootfs.tar"
    _run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(tarball), "."], out,
         "packing the root file system")
    repository, tag = ref.split(":", 1)
    out.write(f"image: docker import as {ref}\n")
    out.flush()
    client.api.import_image_from_file(str(tarball), repository=repository, tag=tag)
    tarball.unlink()


def _build_on_top(client, folder: Path, base: str, ref: str, out: TextIO) -> None:
    import docker

    out.write(f"image: docker build {folder / 'Dockerfile'} FROM {base} as {ref}\n")
    out.flush()
    try:
        client.images.build(path=str(folder), tag=ref, buildargs={"BASE": base}, rm=True, forcerm=True,
                            pull=False, network_mode="none", labels={"org.trellis.sandbox": ref})
    except docker.errors.BuildError as exc:
        log = "".join(str(step.get("stream") or step.get("error") or "") for step in exc.build_log)
        raise ImageError(f"docker build of {folder / 'Dockerfile'} failed: {exc}\n{log[-2000:]}") from exc


def build(rebuild: bool = False, out: TextIO = sys.stdout, folder: Path = DEFINITION_DIR,
          mirror: str = DEFAULT_MIRROR) -> str:
    """Build the runtime image unless the current definition's is there already; returns its
    reference. Raises ImageError with the fix when the daemon, debootstrap or root is missing."""
    client = docker_client()
    ref = image_ref(folder)
    if image_present(client, ref) and not rebuild:
        out.write(f"image: {ref} is up to date\n")
        return ref
    _check_can_build()
    with _build_lock(out):
        if image_present(client, ref) and not rebuild:  # another process built it while we waited
            out.write(f"image: {ref} is up to date\n")
            return ref
        return _build(client, ref, rebuild, out, folder, mirror)


@contextlib.contextmanager
def _build_lock(out: TextIO):
    """One build at a time on this machine (two test workers, two studio workers)."""
    with open(Path(tempfile.gettempdir()) / "trellis-sandbox-image.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.write("image: another build is under way; waiting for it\n")
            out.flush()
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _build(client, ref: str, rebuild: bool, out: TextIO, folder: Path, mirror: str) -> str:
    # the root file system depends on the package lists only: a changed Dockerfile reuses it
    base = f"{BASE_REPOSITORY}:{definition_tag(folder, only=BASE_FILES)}"
    replaced = [_image_id(client, name) for name in (ref, base)]  # what a --rebuild leaves dangling
    started = time.monotonic()
    if rebuild or not image_present(client, base):
        work = Path(tempfile.mkdtemp(prefix="trellis-image-"))
        try:
            rootfs = work / "rootfs"
            _debootstrap(rootfs, folder, mirror, out)
            _install_requirements(rootfs, folder, out)
            _import_root(client, rootfs, base, work, out)
        finally:
            _unmount_under(work)  # an interrupted debootstrap may leave /proc or /sys mounted in it
            shutil.rmtree(work, ignore_errors=True)
    _build_on_top(client, folder, base, ref, out)
    out.write(f"image: built {ref} in {time.monotonic() - started:.0f} s\n")
    for old in replaced:
        if old and old not in (_image_id(client, ref), _image_id(client, base)):
            _remove_image(client, old)
    return ref


def _image_id(client, ref: str) -> str | None:
    import docker

    try:
        return client.images.get(ref).id
    except docker.errors.ImageNotFound:
        return None


def _remove_image(client, image_id: str) -> None:
    """An image a rebuild replaced; one still used by a container stays."""
    import docker

    try:
        client.images.remove(image_id)
    except docker.errors.APIError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.sandbox.image",
                                     description="The Docker sandbox's runtime image (docker/sandbox).")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image unless the current definition's is there already")
    b.add_argument("--rebuild", action="store_true", help="build again even when the image is there")
    b.add_argument("--mirror", default=os.environ.get("TRELLIS_DEBIAN_MIRROR", DEFAULT_MIRROR),
                   help=f"the Debian mirror debootstrap uses (default {DEFAULT_MIRROR})")
    sub.add_parser("tag", help="print the image reference of the current definition")
    sub.add_parser("status", help="say whether the image of the current definition is built")
    args = parser.parse_args(argv)
    try:
        if args.command == "tag":
            print(image_ref())
        elif args.command == "status":
            ref = image_ref()
            built = image_present(docker_client(), ref)
            print(f"{ref} {'is built' if built else f'is not built: run `{BUILD_HINT}`'}")
            return 0 if built else 1
        else:
            build(rebuild=args.rebuild, mirror=args.mirror)
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
