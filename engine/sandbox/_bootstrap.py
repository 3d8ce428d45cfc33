"""Sandbox bootstrap: runs in the child interpreter before the user's program.

The executor copies this file into the fresh working directory and starts
``python -I -B -u <this file> <config-json>``.  It must stay self-contained (stdlib
only, no ``engine`` imports): the child's ``sys.path`` does not contain the project and
the project is not readable from inside the sandbox.

Layers, strongest first, each applied best-effort (what was active is reported on one
``TRELLIS-SANDBOX-INFO:`` stderr line the executor strips again):

1. a private network namespace (no interfaces but a downed loopback) and a private
   PID namespace, so nothing the program starts outlives it,
2. Landlock (Linux >= 5.13): kernel-enforced file-system allowlist, no ``execve`` at
   all, no TCP bind/connect, no signals or abstract unix sockets outside the sandbox;
   this is what still holds when the program goes around Python (ctypes, C extensions),
3. dropping every capability when the child still runs as uid 0,
4. a ``sys.addaudithook`` policy that denies the same things at the Python level and,
   unlike the kernel layers, *reports* them: one ``TRELLIS-SANDBOX-VIOLATION:`` line
   on stderr per denied action, then ``PermissionError``.
"""
import ctypes
import faulthandler
import json
import os
import posix
import resource
import runpy
import signal
import stat
import sys
import sysconfig
import traceback
from types import MappingProxyType

VIOLATION_PREFIX = "TRELLIS-SANDBOX-VIOLATION: "
INFO_PREFIX = "TRELLIS-SANDBOX-INFO: "

# Files and trees the interpreter and numpy/scipy/pandas/scikit-learn legitimately read
# at import or run time.  Everything else outside the working directory is unreadable,
# in particular the project tree (settings, .env files, API keys) and other runs.
SYSTEM_READ_ROOTS = (
    "/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64",
    "/usr/local/lib", "/usr/share", "/usr/local/share",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
    "/etc/timezone", "/etc/mime.types", "/etc/os-release", "/etc/passwd", "/etc/group",
    "/etc/nsswitch.conf", "/etc/host.conf",
    "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys/vm/overcommit_memory",
    "/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/fs/cgroup",
    "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full",
)
SYSTEM_WRITE_ROOTS = ("/dev/null",)


# --------------------------------------------------------------------------- roots

def _python_roots() -> list:
    """The Python installation: prefixes, stdlib, site-packages."""
    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    for name in ("stdlib", "platstdlib", "purelib", "platlib", "include"):
        try:
            roots.append(sysconfig.get_path(name))
        except KeyError:
            pass
    return roots


def _normalise_roots(paths) -> tuple:
    out = []
    for path in paths:
        if not path:
            continue
        real = os.path.realpath(path)
        if real != "/" and real not in out:  # "/" as a root would allow everything
            out.append(real)
    return tuple(out)


def _under(path: str, roots) -> bool:
    for root in roots:
        if path == root or path.startswith(root + "/"):
            return True
    return False


# ------------------------------------------------------------------ kernel layers

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_LANDLOCK = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}

# Landlock access bits (include/uapi/linux/landlock.h).
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1, 2, 4, 8
LL_REMOVE_DIR, LL_REMOVE_FILE, LL_MAKE_CHAR, LL_MAKE_DIR = 16, 32, 64, 128
LL_MAKE_REG, LL_MAKE_SOCK, LL_MAKE_FIFO, LL_MAKE_BLOCK = 256, 512, 1024, 2048
LL_MAKE_SYM, LL_REFER, LL_TRUNCATE, LL_IOCTL_DEV = 4096, 8192, 16384, 32768
LL_FILE_ONLY = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel struct is __attribute__((packed))
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock_abi() -> int:
    numbers = _SYS_LANDLOCK.get(os.uname().machine)
    if numbers is None:
        return 0
    abi = _libc.syscall(numbers[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(abi, 0)


def _handled_fs(abi: int) -> int:
    handled = (1 << 13) - 1
    if abi >= 2:
        handled |= LL_REFER
    if abi >= 3:
        handled |= LL_TRUNCATE
    if abi >= 5:
        handled |= LL_IOCTL_DEV
    return handled


def _add_path_rule(ruleset_fd: int, path: str, access: int, add_rule_nr: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # absent on this system: nothing to allow
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= LL_FILE_ONLY  # the kernel rejects directory rights on files
        attr = _PathBeneathAttr(access, fd)
        _libc.syscall(add_rule_nr, ruleset_fd, 1, ctypes.byref(attr), 0)
    finally:
        os.close(fd)


def apply_landlock(read_roots, write_roots) -> int:
    """Restrict this process (and anything it could start) to the allowlists.
    Returns the Landlock ABI in force, 0 when unavailable."""
    abi = _landlock_abi()
    if abi < 1:
        return 0
    create_nr, add_rule_nr, restrict_nr = _SYS_LANDLOCK[os.uname().machine]
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled, 0, 0)
    size = 8
    if abi >= 4:  # deny every TCP bind/connect: no rule will allow any port
        attr.handled_access_net, size = 1 | 2, 16
    if abi >= 6:  # no signals / abstract unix sockets to processes outside the sandbox
        attr.scoped, size = 1 | 2, 24
    ruleset_fd = _libc.syscall(create_nr, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset_fd < 0:
        return 0
    try:
        # No LL_EXECUTE anywhere: execve() of any file fails in the kernel.
        read = LL_READ_FILE | LL_READ_DIR
        write = handled & ~(LL_EXECUTE | LL_MAKE_CHAR | LL_MAKE_BLOCK)
        for root in read_roots:
            _add_path_rule(ruleset_fd, root, read & handled, add_rule_nr)
        for root in write_roots:
            _add_path_rule(ruleset_fd, root, write, add_rule_nr)
        _libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, required by Landlock
        if _libc.syscall(restrict_nr, ruleset_fd, 0) != 0:
            return 0
    finally:
        os.close(ruleset_fd)
    return abi


CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWUSER = 0x40000000, 0x20000000, 0x10000000
CLONE_NEWCGROUP, CLONE_NEWTIME = 0x02000000, 0x00000080
PR_SET_PDEATHSIG = 1


def unshare_namespaces(want_mounts: bool) -> tuple:
    """A private network namespace (all networking fails, even via ctypes), a PID
    namespace (every process the program manages to start dies with it) and, when
    ``want_mounts``, a mount namespace for the private file-system view.  Returns
    (netns, pidns, mountns).  An unprivileged engine needs a user namespace for any of
    them; then its uid is mapped to 0 inside (and is still not root outside)."""
    outer_uid, outer_gid = os.getuid(), os.getgid()
    user = 0 if outer_uid == 0 else CLONE_NEWUSER
    for mounts in ((True, False) if want_mounts else (False,)):
        base = CLONE_NEWUTS | CLONE_NEWIPC | (CLONE_NEWNS if mounts else 0)
        for net, pid in ((True, True), (True, False), (False, True), (False, False)):
            flags = base | (CLONE_NEWNET if net else 0) | (CLONE_NEWPID if pid else 0)
            if _libc.unshare(flags | user) == 0:
                if user:
                    _map_user(outer_uid, outer_gid)
                return net, pid, mounts
    return False, False, False


def _map_user(uid: int, gid: int) -> None:
    for name, text in (("setgroups", "deny"), ("uid_map", "0 %d 1" % uid), ("gid_map", "0 %d 1" % gid)):
        try:
            with open("/proc/self/" + name, "w") as fh:
                fh.write(text)
        except OSError:
            pass


# ----------------------------------------------------------------- mount view

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# Top-level links of a merged-/usr system (/lib -> usr/lib): ld.so.cache names /lib paths.
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "mount %s on %s: %s" % (source, target, os.strerror(err)))


def _bind(path: str, new_root: str, writable: bool) -> None:
    """Bind one host file or tree at the same path inside the new root."""
    try:
        st = os.stat(path)
    except OSError:
        return  # absent on this system: nothing to show
    target = new_root + path
    if stat.S_ISDIR(st.st_mode):
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    _mount(path, target, None, MS_BIND)
    device = stat.S_ISCHR(st.st_mode)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if device else MS_NODEV)
    if not writable and not device:
        flags |= MS_RDONLY
    _mount(None, target, None, flags)


def build_view(new_root: str, read_roots, write_roots) -> None:
    """Replace this process's file system with a fresh one holding only the allowlists.

    A tmpfs becomes the root; every read root is bound read-only and every write root
    read-write at its own path; /proc is this PID namespace's own.  Everything else
    (the project, var/ with its sockets and database, other runs, /root, /home, /tmp)
    does not exist here, whatever a program does, ctypes included.  The tmpfs itself
    is then made read-only."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates to the host
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for name in ROOT_LINKS:
        if os.path.islink("/" + name):
            os.symlink(os.readlink("/" + name), new_root + "/" + name)
    bound: list = []
    for path in sorted(set(read_roots), key=len):
        if path.startswith("/proc/") or any(_under(path, (b,)) for b in bound):
            continue  # procfs is mounted afresh; a subtree of a bound tree is there already
        _bind(path, new_root, writable=False)
        bound.append(path)
    for path in write_roots:
        _bind(path, new_root, writable=True)
    os.makedirs(new_root + "/proc", 0o555, exist_ok=True)
    _mount("proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    old = new_root + "/.old-root"
    os.mkdir(old, 0o700)
    os.chdir(new_root)
    if _libc.syscall(_SYS_PIVOT_ROOT[os.uname().machine], b".", b".old-root") != 0:
        err = ctypes.get_errno()
        raise OSError(err, "pivot_root: " + os.strerror(err))
    os.chdir("/")
    if _libc.umount2(b"/.old-root", MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "detaching the host root: " + os.strerror(err))
    os.rmdir("/.old-root")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_to_user(uid: int, gid: int, max_processes: int) -> int:
    """Become the run's own unprivileged user, for good.  RLIMIT_NPROC counts the tasks
    of that uid, which belongs to this run alone: a fork bomb stops at the cap even where
    no cgroup could be made.  Returns the uid now in force."""
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    except (ValueError, OSError):
        pass
    if os.getuid() == 0 and uid != 0 and _inside_initial_userns():
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    return os.getuid()


def _inside_initial_userns() -> bool:
    """uid 0 of the host (not a user namespace's mapped 0, which cannot switch users)."""
    try:
        with open("/proc/self/uid_map") as fh:
            return fh.read().split()[:3] == ["0", "0", "4294967295"]
    except OSError:
        return True


# ---------------------------------------------------------------------- seccomp

SCMP_ACT_ALLOW = 0x7FFF0000
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97
SCMP_CMP_NE, SCMP_CMP_MASKED_EQ = 1, 7
AF_UNIX = 1
# No legitimate analysis or training program needs these; each is a way around the
# other layers (namespaces, mounts, ptrace, kernel keyrings, io_uring, BPF, modules...).
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "acct", "quotactl", "syslog", "open_by_handle_at", "name_to_handle_at",
    "iopl", "ioperm", "fanotify_init", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "fspick", "mount_setattr", "pidfd_getfd", "kcmp", "vhangup",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "execve", "execveat",
    "mknod", "mknodat", "setuid", "setgid", "setreuid", "setregid", "setresuid",
    "setresgid", "setgroups", "setfsuid", "setfsgid", "personality", "lookup_dcookie",
)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def apply_seccomp() -> bool:
    """A syscall filter (libseccomp): the calls above fail with EPERM, clone3 reports
    ENOSYS (glibc then uses clone, whose flags a filter can see), clone may not create
    namespaces, and sockets other than AF_UNIX pairs cannot be made.  Returns whether
    the filter is in force."""
    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return False
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        return False

    def rule(name: str, errno: int, *cmps) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            return  # not a call on this architecture
        array = (_ArgCmp * max(1, len(cmps)))(*cmps)
        if lib.seccomp_rule_add_array(ctx, 0x00050000 | errno, nr, len(cmps), array) != 0:
            raise OSError("seccomp rule for %s refused" % name)

    try:
        for name in DENIED_SYSCALLS:
            rule(name, EPERM)
        rule("clone3", ENOSYS)
        for flag in (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWPID,
                     CLONE_NEWUSER, CLONE_NEWCGROUP, CLONE_NEWTIME):
            rule("clone", EPERM, _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        rule("socket", EAFNOSUPPORT, _ArgCmp(0, SCMP_CMP_NE, AF_UNIX, 0))
        return lib.seccomp_load(ctx) == 0
    except OSError:
        return False
    finally:
        lib.seccomp_release(ctx)


def _mirror_exit(status: int) -> None:
    """Leave the way the waited-for process left: same exit code or same signal."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        os._exit(code)
    try:
        signal.signal(-code, signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL and SIGSTOP cannot be handled, so need no resetting
    os.kill(os.getpid(), -code)
    os._exit(128 - code)


def enter_pid_namespace() -> None:
    """Fork twice; returns only in the grandchild, which runs the program.

    host bootstrap (the executor's child, in its process group): waits, then mirrors
        the program's exit status, which it reads from a pipe;
    namespace init (pid 1): reaps orphans until the program exits, reports its
        status and exits, whereupon the kernel kills everything left in the
        namespace.  It also dies with the host bootstrap (PDEATHSIG), so killing the
        process group on timeout takes the whole namespace down, even processes that
        called setsid() to leave the group.
    The program itself cannot be pid 1: init ignores signals it has no handler for,
    which would break os.kill(os.getpid(), ...) and the like."""
    status_r, status_w = os.pipe()
    init_pid = os.fork()
    if init_pid:
        os.close(status_w)
        _, init_status = os.waitpid(init_pid, 0)
        reported = os.read(status_r, 16)
        _mirror_exit(int(reported) if reported else init_status)
    os.close(status_r)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    program_pid = os.fork()
    if program_pid:
        _reap_until(program_pid, status_w)
    os.close(status_w)


def _reap_until(program_pid: int, status_w: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == program_pid:
            os.write(status_w, str(status).encode())
            os._exit(0)


def drop_bounding_set() -> None:
    """Take every capability out of the bounding set while we still may (CAP_SETPCAP):
    nothing this process becomes later can gain one back."""
    if os.geteuid() == 0:
        for cap in range(64):
            _libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; EINVAL past the last cap


def drop_capabilities() -> bool:
    """A process still uid 0 (a user namespace's root, when the engine itself is not
    root) loses every capability it holds (mounts, raw I/O, ptrace...)."""
    if os.geteuid() != 0:
        return True  # an ordinary user: no capabilities to begin with

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    return _libc.capset(ctypes.byref(header), data) == 0


# -------------------------------------------------------------------- audit hook

def make_hook(workdir: str, read_roots: tuple, write_roots: tuple):
    """Build the audit hook.

    The helpers take the C functions and builtins they need as default arguments
    captured now, so a program (or a library mocking ``os``/``os.path``) that
    monkeypatches those modules does not change the policy.  This is no defence
    against a program that sets out to subvert the hook (rewriting closure cells,
    ctypes): the kernel layers are what still hold then."""
    # procfs is the host's: inside a PID namespace /proc/self is not /proc/<getpid()>
    proc_self = os.path.realpath("/proc/self")
    readable = tuple(read_roots) + tuple(write_roots) + (proc_self,)
    writable = (workdir,) + tuple(write_roots)
    # /dev/stdout and /dev/stderr resolve to /proc/<pid>/fd/pipe:[N]: our own pipes.
    own_pipes = proc_self + "/fd/pipe:["
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

    def resolve(path, dir_fd=None, follow=True, _lstat=posix.lstat,
                _readlink=posix.readlink, _getcwd=posix.getcwd, _fspath=posix.fspath,
                _fsdecode=os.fsdecode, _islnk=stat.S_ISLNK, _str=str, _bytes=bytes,
                _int=int, _isinstance=isinstance):
        """realpath() from C primitives only; None for an unresolvable fd."""
        if _isinstance(path, _int):
            try:
                return _readlink("/proc/self/fd/%d" % path)
            except OSError:
                return None
        if path is None:
            path = "."
        if not _isinstance(path, (_str, _bytes)):
            path = _fspath(path)
        if _isinstance(path, _bytes):
            path = _fsdecode(path)
        if not path.startswith("/"):
            base = _getcwd()
            if dir_fd is not None and dir_fd >= 0:
                try:
                    base = _readlink("/proc/self/fd/%d" % dir_fd)
                except OSError:
                    return None
            path = base + "/" + path
        parts = path.split("/")
        done = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = "/" + "/".join(done + [part])
            if not follow and not parts:
                done.append(part)
                break
            try:
                is_link = _islnk(_lstat(candidate).st_mode)
            except OSError:
                is_link = False
            if is_link and hops < 40:
                hops += 1
                try:
                    target = _readlink(candidate)
                except OSError:
                    return None
                if target.startswith("/"):
                    done = []
                parts = target.split("/") + parts
                continue
            done.append(part)
        return "/" + "/".join(done)

    def under(path, roots, _len=len):
        for root in roots:
            if path == root or (path.startswith(root) and path[_len(root):_len(root) + 1] == "/"):
                return True
        return False

    def deny(event, detail, _write=posix.write, _str=str):
        text = _str(detail)
        if len(text) > 300:
            text = text[:300] + "..."
        line = VIOLATION_PREFIX + event + " " + text.replace("\n", "\\n") + "\n"
        try:
            _write(2, line.encode("utf-8", "replace"))
        except OSError:
            pass
        raise PermissionError("sandbox: %s denied: %s" % (event, text))

    def check_read(event, path, dir_fd=None, _lexists=posix.lstat):
        real = resolve(path, dir_fd)
        if real is None or under(real, readable):
            return
        try:
            _lexists(real)
        except OSError:
            return  # nothing there, so nothing to leak; the call fails on its own
        deny(event, real)

    def check_write(event, path, dir_fd=None, follow=True):
        real = resolve(path, dir_fd, follow)
        if real is None:
            deny(event, "unresolvable path %r" % (path,))
        if not under(real, writable) and not real.startswith(own_pipes):
            deny(event, real)

    def check_open(path, mode, flags, _isinstance=isinstance, _int=int, _str=str,
                   _stat=posix.stat, _isdir=stat.S_ISDIR):
        if _isinstance(path, _int):
            return  # an already open descriptor: its access was checked when opened
        wants_write = bool((flags or 0) & write_flags) or (
            _isinstance(mode, _str) and any(c in mode for c in "wax+"))
        if wants_write:
            check_write("open", path)
            return
        check_read("open", path)
        if mode is None:
            # os.open() of a directory hands out a dir_fd for later os.open(...,
            # dir_fd=...) calls whose audit event does not carry the dir_fd.
            real = resolve(path)
            try:
                is_dir = _isdir(_stat(real).st_mode)
            except OSError:
                is_dir = False
            if is_dir and not under(real, writable):
                deny("open", "directory descriptor outside the workdir: " + real)

    process_events = frozenset((
        "subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn",
        "os.fork", "os.forkpty", "_posixsubprocess.fork_exec", "pty.spawn",
        "webbrowser.open", "sqlite3.enable_load_extension", "sqlite3.load_extension",
    ))
    network_events = frozenset((
        "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
        "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
        "socket.gethostbyaddr", "socket.getnameinfo",
    ))
    # event -> (indexes of path args, index of their dir_fd or None, follow symlinks)
    write_events = MappingProxyType({
        "os.remove": ((0,), 1, False), "os.rmdir": ((0,), 1, False),
        "os.mkdir": ((0,), 2, False), "os.chmod": ((0,), 2, True),
        "os.chown": ((0,), 3, True), "os.utime": ((0,), 3, True),
        "os.truncate": ((0,), None, True), "os.setxattr": ((0,), None, True),
        "os.removexattr": ((0,), None, True), "os.chflags": ((0,), None, True),
        "os.lchflags": ((0,), None, False), "os.mkfifo": ((0,), 2, False),
        "os.mknod": ((0,), 3, False), "os.symlink": ((1,), 2, False),
        "shutil.rmtree": ((0,), 1, False), "shutil.chown": ((0,), None, True),
    })

    def hook(event, args, _process=process_events, _network=network_events,
             _writes=write_events, _check_open=check_open, _check_read=check_read,
             _check_write=check_write, _deny=deny, _len=len, _getpid=posix.getpid,
             _socket_first=frozenset(("socket.connect", "socket.bind", "socket.sendto",
                                      "socket.sendmsg"))):
        if event == "open":
            _check_open(*args[:3])
        elif event in _writes:
            indexes, fd_index, follow = _writes[event]
            dir_fd = args[fd_index] if fd_index is not None and fd_index < _len(args) else None
            for i in indexes:
                _check_write(event, args[i], dir_fd, follow)
        elif event in ("os.rename", "os.link"):
            _check_write(event, args[0], args[2], False)
            _check_write(event, args[1], args[3], False)
        elif event in ("os.listdir", "os.scandir"):
            _check_read(event, args[0])
        elif event in _process:
            _deny(event, args[0] if args else "")
        elif event == "socket.__new__":
            # the seccomp filter refuses these families in the kernel too; this reports it
            if args[1] != 1 and args[1] != -1:  # AF_UNIX pairs (asyncio); -1: from a fd
                _deny(event, "address family %s" % (args[1],))
        elif event in _network:
            # connect/bind/sendto/sendmsg get the socket first, the lookups do not
            _deny(event, args[1] if event in _socket_first else args[0])
        elif event in ("os.kill", "os.killpg"):
            if args[0] not in (0, _getpid()):
                _deny(event, "pid %s" % (args[0],))
        elif event == "resource.prlimit":
            if args[0] not in (0, _getpid()):
                _deny(event, "pid %s" % (args[0],))
        elif event == "sqlite3.connect":
            database = args[0]
            if database not in (":memory:", "", b":memory:", b""):
                _check_write(event, database)
        elif event == "object.__setattr__":
            if args[0] is hook and args[1] in ("__code__", "__defaults__", "__kwdefaults__"):
                _deny(event, "tampering with the sandbox hook")

    return hook


def _deny_fork_exec(*_args, **_kwargs):
    """multiprocessing's spawn/forkserver call _posixsubprocess.fork_exec directly,
    which raises no audit event of its own."""
    line = VIOLATION_PREFIX + "_posixsubprocess.fork_exec process creation\n"
    os.write(2, line.encode())
    raise PermissionError("sandbox: process creation denied")


# ------------------------------------------------------------------------- main

def _print_user_traceback(exc: BaseException, bootstrap_file: str) -> None:
    """Print the traceback without bootstrap, audit-hook and runpy frames: the reader
    (often the next agent) should see the program's own lines only."""
    def noise(frame) -> bool:
        return frame.filename == bootstrap_file or "runpy" in frame.filename

    def clean(te) -> None:
        while te is not None:
            te.stack = traceback.StackSummary.from_list(
                [f for f in te.stack if not noise(f)])
            if te.__cause__ is not None:
                clean(te.__cause__)
            te = te.__context__

    try:
        te = traceback.TracebackException.from_exception(exc)
        clean(te)
        sys.stderr.write("".join(te.format()))
    except Exception:  # noqa: BLE001 - never hide the original error
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    sys.stderr.flush()


def main() -> None:
    config = json.loads(sys.argv[1])
    workdir = os.path.realpath(config["workdir"])
    entrypoint = config["entrypoint"]
    bootstrap_file = os.path.abspath(__file__)

    read_roots = _normalise_roots(
        list(SYSTEM_READ_ROOTS) + _python_roots() + list(config.get("extra_read", ())))
    # sys.path as real paths, read now: a .venv reached through a symlink is a path inside the
    # project, which the private view below does not hold, so its packages would vanish.
    real_sys_path = [os.path.realpath(p) if p else p for p in sys.path]
    write_roots = _normalise_roots([workdir] + list(SYSTEM_WRITE_ROOTS))

    view_root = config.get("view_root")
    netns, pidns, mountns = unshare_namespaces(want_mounts=bool(view_root))
    if pidns:
        enter_pid_namespace()
    view = False
    if view_root:
        try:
            if not mountns:
                raise OSError("no mount namespace")
            build_view(view_root, read_roots, write_roots)
            view = True
        except OSError as exc:
            if os.getuid() == 0 and _inside_initial_userns():
                # Without the view, the unprivileged user cannot even load the interpreter
                # (it lives under /root here): fail closed rather than run the program as root.
                os.write(2, ("sandbox: could not build the private file-system view (%s); "
                             "refusing to run generated code as root\n" % exc).encode())
                os._exit(126)
    drop_bounding_set()
    uid = drop_to_user(int(config.get("uid", 0)), int(config.get("gid", 0)),
                       int(config.get("max_processes", 4096)))
    landlock = apply_landlock(read_roots + ("/proc/self",), write_roots)
    caps_dropped = drop_capabilities()
    seccomp = apply_seccomp()
    info = {"landlock": landlock, "netns": netns, "pidns": pidns, "view": view,
            "seccomp": seccomp, "caps_dropped": caps_dropped, "uid": uid}
    os.write(2, (INFO_PREFIX + json.dumps(info) + "\n").encode())

    faulthandler.enable()  # a segfault still leaves a Python traceback behind
    sys.dont_write_bytecode = True  # .pyc writes into site-packages would be violations
    # Mimic `python main.py`: the program's directory first, and nothing from outside
    # the allowed trees (an editable install could put the project on sys.path).
    script_dir = os.path.normpath(os.path.join(workdir, os.path.dirname(entrypoint)))
    sys.path[:] = [script_dir] + [p for p in dict.fromkeys(real_sys_path) if p and _under(p, read_roots)]
    sys.argv[:] = [entrypoint] + list(config.get("args", ()))
    os.chdir(workdir)

    hook = make_hook(workdir, read_roots, (workdir,) + tuple(SYSTEM_WRITE_ROOTS))
    sys.addaudithook(hook)
    import _posixsubprocess
    _posixsubprocess.fork_exec = _deny_fork_exec
    del hook, config

    try:
        runpy.run_path(entrypoint, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report whatever the program raised
        _print_user_traceback(exc, bootstrap_file)
        sys.exit(1)


if __name__ == "__main__":
    main()
