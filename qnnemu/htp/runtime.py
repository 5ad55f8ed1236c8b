"""The shared HTP of a process: resources, priorities, yielding and pre-emption, cDSP sessions
(QNN "HTP Yielding and Pre-Emption"; QNN HTP backend documentation, "Yielding and Pre-Emption",
"Byte-Granularity VTCM", "VTCM Sharing", "Graph Priority", "Multiple cDSP Sessions", "Model
Loading Across Multiple Sessions", "I/O Buffer Registration Failure").

One ``HtpRuntime`` per device (``runtime_for``), shared by every backend, context and graph of
the process, holds:

* the device's compute resources: VTCM (the SoC's size; requests rounded to whole MB before v81,
  to 64 KB from v81 on -- "Byte-Granularity VTCM"), one HMX unit, the SoC's HVX threads;
* the scheduling rules of "HTP Yielding and Pre-Emption": a client acquires VTCM with its Hexagon
  OS thread priority (``PRIORITY_TABLE``: LOW 0xC5 ... HIGH 0xBB, a lower number runs first);
  an equal or lower priority waits, a higher priority pre-empts -- at the running client's next
  yield point (an op boundary of a QNN graph's runlist), not at once; two QNN graphs never run
  concurrently; clients sharing HVX and VTCM may run concurrently only inside one PD and only
  from v73 on; QNN always takes HMX (a client running alongside QNN runs without it);
* the cDSP sessions (``SessionPool``): 4 GB of virtual address space each, 3.75 GB usable; a
  context binary goes to the first session it fits, else a new one, never split; I/O is mapped
  into its context's session.

The decision itself is the pure function ``admit`` (which of the ready clients run now); the
deterministic scenario simulator (qnnemu/htp/timeline.py) and the online API here
(``HtpRuntime.request`` / ``yield_point`` / ``release``) both use it, so the timelines the tests
pin are the decisions an execute gets.  Times are virtual (microseconds of the device clock, the
cost model's cycles at the voted clock); nothing here sleeps.
"""
from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass, field

from .priority import table_row
from .soc import SocInfo

MIB = 1 << 20
KIB = 1 << 10
GIB = 1 << 30

# "Byte-Granularity VTCM": from v81 byte-granularity requests, "presently ... a multiple of 64KB";
# before v81 "only MB requests were supported".
BYTE_GRANULARITY_FROM_ARCH = 81
VTCM_GRANULE_BYTE_API = 64 * KIB
VTCM_GRANULE_MB_API = MIB
# "HTP Yielding and Pre-Emption", "Resource Sharing under Concurrency": "Concurrency is not
# supported prior to Hexagon V73" (VTCM Sharing starts with v73).
CONCURRENCY_FROM_ARCH = 73

# "Multiple cDSP Sessions": "each session supports a virtual address space of 4 GB; however, only
# 3.75 GB of this space is usable".
SESSION_VA_BYTES = 4 * GIB
SESSION_USABLE_FRACTION = (15, 16)          # 3.75 of 4
SESSION_VA_ENV = "QNNEMU_SESSION_VA_BYTES"  # scales the session (tests run the examples in MB)
# "The number of concurrent sessions that can be supported per CPU application process ... [is]
# dependent on the hardware configuration of the SoC": the documentation gives no number; the
# emulator allows 4 per process on every SoC (QNNEMU_MAX_SESSIONS overrides it).
MAX_SESSIONS_PER_PROCESS = 4
MAX_SESSIONS_ENV = "QNNEMU_MAX_SESSIONS"

_RUNTIMES: dict[int, HtpRuntime] = {}
_RUNTIMES_LOCK = threading.RLock()   # runtime_for creates an HtpRuntime, which calls process_sessions


def vtcm_granule(arch: int) -> int:
    return VTCM_GRANULE_BYTE_API if arch >= BYTE_GRANULARITY_FROM_ARCH else VTCM_GRANULE_MB_API


def round_vtcm(nbytes: int, arch: int) -> int:
    """A VTCM request as the device reserves it: rounded up to the arch's granule."""
    granule = vtcm_granule(arch)
    return -(-int(nbytes) // granule) * granule


def os_priority(priority) -> int:
    """A client's Hexagon OS thread priority: a ``Qnn_Priority_t`` (an int 0..500, through the
    mapping table), a level name (LOW, MEDIUM = NORMAL, NORMAL_HIGH, HIGH) or, for non-QNN
    clients, the OS priority itself as a hex string ("0xc2"; 0x00..0xff)."""
    if isinstance(priority, str):
        text = priority.strip()
        if text.lower().startswith("0x"):
            try:
                value = int(text, 16)
            except ValueError:
                value = -1
            if 0 <= value <= 0xFF:
                return value
        names = {"LOW": 0xC5, "MEDIUM": 0xC0, "NORMAL": 0xC0, "NORMAL_HIGH": 0xBD, "HIGH": 0xBB}
        key = text.upper().removeprefix("QNN_PRIORITY_")
        if key in names:
            return names[key]
    elif isinstance(priority, int) and not isinstance(priority, bool):
        row = table_row(priority)
        if row is not None:
            return row.hexagon_os_priority
    raise ValueError(f"priority {priority!r}: give LOW, MEDIUM/NORMAL, NORMAL_HIGH, HIGH, a "
                     "Qnn_Priority_t (0..500) or a Hexagon OS priority as a hex string (0x00..0xff)")


@dataclass
class Client:
    """One Hexagon client: a QNN graph execute (``qnn``) or a non-QNN "Client App".

    ``work`` are the durations (virtual us) between its yield points: a QNN graph's ops (it
    yields at an op boundary); a client app is evicted at once (one chunk per time unit is not
    needed: ``yield_anywhere``)."""

    name: str
    priority: int                  # Hexagon OS thread priority (lower runs first)
    hmx: int = 1
    hvx: int = 1
    vtcm: int = 0                  # bytes, already rounded
    pd: int = 0                    # cDSP session / process domain
    qnn: bool = True
    work: list[float] = field(default_factory=list)
    yield_anywhere: bool = False
    # runtime state
    seq: int = 0
    done: float = 0.0              # work done so far

    @property
    def total(self) -> float:
        return float(sum(self.work))

    @property
    def remaining(self) -> float:
        return self.total - self.done

    def next_yield_point(self, now_done: float) -> float | None:
        """Work done at the next yield point at or after ``now_done`` (None: none before the end)."""
        if self.yield_anywhere:
            return now_done
        acc = 0.0
        for w in self.work:
            acc += w
            if acc >= now_done - 1e-9 and acc < self.total - 1e-9:
                return acc
        return None


@dataclass(frozen=True)
class Device:
    """The resources one scheduling decision looks at."""

    arch: int
    vtcm_bytes: int
    hvx_threads: int
    hmx_units: int = 1

    @classmethod
    def of(cls, soc: SocInfo) -> Device:
        return cls(arch=soc.arch, vtcm_bytes=soc.vtcm_bytes, hvx_threads=soc.hvx_threads,
                   hmx_units=1 if soc.hmx else 0)

    @property
    def concurrency(self) -> bool:
        return self.arch >= CONCURRENCY_FROM_ARCH


@dataclass
class Grant:
    """What an admitted client holds."""

    hmx: bool
    hvx_lanes: tuple[int, ...]
    vtcm: tuple[int, int]          # [start, end) byte range


def _fits(device: Device, chosen: list[tuple[Client, bool]], client: Client) -> tuple[bool, bool]:
    """Whether ``client`` may run alongside ``chosen`` (clients with their HMX flag), and whether
    it then holds HMX."""
    if chosen and not device.concurrency:
        return False, False
    if any(c.pd != client.pd for c, _ in chosen):
        return False, False                          # "not supported across PDs in any case"
    if client.qnn and any(c.qnn for c, _ in chosen):
        return False, False                          # "impossible for two QNN graphs"
    hmx_taken = sum(1 for _, h in chosen if h)
    wants_hmx = client.hmx > 0 and device.hmx_units > 0
    holds_hmx = False
    if wants_hmx:
        if hmx_taken < device.hmx_units:
            holds_hmx = True
        elif client.qnn:
            return False, False                      # "QNN will pause until it can acquire it"
        # a non-QNN client running alongside QNN "may not utilize" HMX: it runs without it
    if client.qnn and not holds_hmx and device.hmx_units > 0:
        return False, False
    if sum(c.hvx for c, _ in chosen) + client.hvx > device.hvx_threads:
        return False, False
    if sum(c.vtcm for c, _ in chosen) + client.vtcm > device.vtcm_bytes:
        return False, False
    return True, holds_hmx


def admit(device: Device, ready: list[Client], running: set[str], pinned: frozenset[str] | set[str] = frozenset()
          ) -> list[tuple[Client, bool]]:
    """Which of ``ready`` run now, with their HMX flag (QNN "HTP Yielding and Pre-Emption").

    Clients are taken in priority order (a lower Hexagon OS number first); among equal
    priorities a running client before a waiting one ("same priority ... must wait"), then by
    arrival.  ``pinned`` clients (running ones that have not reached a yield point yet) are
    taken first whatever their priority: a higher priority waits for the eviction."""
    order = sorted(ready, key=lambda c: (c.name not in pinned, c.priority, c.name not in running, c.seq))
    chosen: list[tuple[Client, bool]] = []
    for client in order:
        ok, holds_hmx = _fits(device, chosen, client)
        if ok:
            chosen.append((client, holds_hmx))
        elif client.name in pinned:
            chosen.append((client, client.hmx > 0 and not any(h for _, h in chosen)))
    return chosen


class Placement:
    """Lanes of the admitted clients: HVX threads lowest-free first, VTCM as byte ranges (QNN
    graphs at the highest free addresses, other clients at the lowest -- the layout of the
    tables of "Resource Sharing under Concurrency", where the client app holds VTCM 0).  A client
    that keeps running keeps its lanes."""

    def __init__(self, device: Device):
        self.device = device
        self.grants: dict[str, Grant] = {}

    def update(self, chosen: list[tuple[Client, bool]]) -> dict[str, Grant]:
        names = {c.name for c, _ in chosen}
        self.grants = {n: g for n, g in self.grants.items() if n in names}
        for client, holds_hmx in chosen:
            if client.name in self.grants:
                continue
            used_hvx = {lane for g in self.grants.values() for lane in g.hvx_lanes}
            lanes = tuple(itertools.islice((i for i in range(self.device.hvx_threads)
                                            if i not in used_hvx), client.hvx))
            self.grants[client.name] = Grant(holds_hmx, lanes, self._vtcm_range(client))
        return dict(self.grants)

    def _vtcm_range(self, client: Client) -> tuple[int, int]:
        if client.vtcm == 0:
            return (0, 0)
        taken = sorted(g.vtcm for g in self.grants.values() if g.vtcm[1] > g.vtcm[0])
        gaps, cursor = [], 0
        for start, end in taken:
            if start > cursor:
                gaps.append((cursor, start))
            cursor = max(cursor, end)
        if cursor < self.device.vtcm_bytes:
            gaps.append((cursor, self.device.vtcm_bytes))
        fitting = [g for g in gaps if g[1] - g[0] >= client.vtcm]
        if not fitting:      # fragmentation: the sum fits (admit checked it); compact lowest-first
            return (0, client.vtcm)
        if client.qnn:
            start, end = fitting[-1]
            return (end - client.vtcm, end)
        start, _ = fitting[0]
        return (start, start + client.vtcm)


# ----------------------------------------------------------------------------- cDSP sessions
class SessionError(Exception):
    """A context or an I/O mapping that no session can hold (``kind``: "context" or "io")."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def session_va_bytes(environ=None) -> int:
    text = (os.environ if environ is None else environ).get(SESSION_VA_ENV, "").strip()
    if not text:
        return SESSION_VA_BYTES
    value = int(text, 0)
    if value <= 0:
        raise ValueError(f"{SESSION_VA_ENV}={text!r}: give a positive byte count")
    return value


def max_sessions(environ=None) -> int:
    text = (os.environ if environ is None else environ).get(MAX_SESSIONS_ENV, "").strip()
    value = int(text, 0) if text else MAX_SESSIONS_PER_PROCESS
    if value <= 0:
        raise ValueError(f"{MAX_SESSIONS_ENV}={text!r}: give a positive count")
    return value


@dataclass
class Session:
    index: int
    usable: int
    contexts: dict[object, int] = field(default_factory=dict)      # context key -> bytes
    io: dict[object, int] = field(default_factory=dict)            # mapping key -> bytes
    io_reserved: dict[object, int] = field(default_factory=dict)   # context key -> reserved I/O

    @property
    def used(self) -> int:
        return sum(self.contexts.values()) + sum(self.io.values()) + sum(self.io_reserved.values())

    @property
    def free(self) -> int:
        return self.usable - self.used


class SessionPool:
    """The cDSP sessions of the process ("Model Loading Across Multiple Sessions"): a context is
    deserialized into the first session with room for it (and its reserved I/O), else a new
    session is opened, up to ``limit``; a context is never split.  I/O buffers of a context are
    mapped into that context's session ("the I/O buffers specific to a context need to be mapped
    to the same session where that context is deserialized")."""

    def __init__(self, va_bytes: int | None = None, limit: int | None = None):
        self.va_bytes = session_va_bytes() if va_bytes is None else va_bytes
        num, den = SESSION_USABLE_FRACTION
        self.usable = self.va_bytes * num // den
        self.limit = max_sessions() if limit is None else limit
        self.sessions: list[Session] = []
        self.where: dict[object, int] = {}          # context key -> session index
        self.io_owner: dict[object, tuple[object, int]] = {}   # io key -> (context key, bytes from its reserve)
        self._lock = threading.Lock()

    def place(self, key, nbytes: int, io_reserve: int = 0) -> int:
        """Deserialize a context of ``nbytes`` (plus ``io_reserve`` bytes of I/O space kept for it,
        IO_MEM_ESTIMATION): returns its session index or raises SessionError("context")."""
        need = int(nbytes) + int(io_reserve)
        with self._lock:
            for session in self.sessions:
                if session.free >= need:
                    return self._put(session, key, nbytes, io_reserve)
            if need > self.usable:
                raise SessionError("context", f"the context needs {need} bytes of virtual address "
                                   f"space; a cDSP session has {self.usable} usable "
                                   "(a context binary cannot be split across sessions)")
            if len(self.sessions) >= self.limit:
                raise SessionError("context", f"the context needs {need} bytes of virtual address "
                                   f"space; none of the process's {self.limit} cDSP sessions has "
                                   f"room (free: {[s.free for s in self.sessions]})")
            session = Session(len(self.sessions), self.usable)
            self.sessions.append(session)
            return self._put(session, key, nbytes, io_reserve)

    def _put(self, session: Session, key, nbytes: int, io_reserve: int) -> int:
        session.contexts[key] = int(nbytes)
        if io_reserve:
            session.io_reserved[key] = int(io_reserve)
        self.where[key] = session.index
        return session.index

    def session_of(self, key) -> int | None:
        return self.where.get(key)

    def map_io(self, context_key, io_key, nbytes: int) -> int:
        """Map an I/O buffer of ``nbytes`` for a context into its session (the context's reserved
        I/O space first); raises SessionError("io") when the session has no room."""
        with self._lock:
            index = self.where.get(context_key)
            if index is None:
                raise SessionError("io", "the context is in no cDSP session")
            session = self.sessions[index]
            reserved = session.io_reserved.get(context_key, 0)
            from_reserve = min(reserved, int(nbytes))
            if session.free + from_reserve < int(nbytes):
                raise SessionError("io", f"cDSP session #{index} has {session.free + from_reserve} "
                                   f"bytes of virtual address space left; the buffer needs {nbytes}")
            if from_reserve:
                session.io_reserved[context_key] = reserved - from_reserve
            session.io[io_key] = int(nbytes)
            self.io_owner[io_key] = (context_key, from_reserve)
            return index

    def unmap_io(self, io_key) -> None:
        with self._lock:
            for session in self.sessions:
                if io_key in session.io:
                    del session.io[io_key]
                    ctx, from_reserve = self.io_owner.pop(io_key, (None, 0))
                    if from_reserve and ctx in session.contexts:
                        session.io_reserved[ctx] = session.io_reserved.get(ctx, 0) + from_reserve
                    return

    def remove(self, key) -> None:
        with self._lock:
            index = self.where.pop(key, None)
            if index is not None:
                session = self.sessions[index]
                session.contexts.pop(key, None)
                session.io_reserved.pop(key, None)
                for io_key in [k for k, (ctx, _) in self.io_owner.items() if ctx is key]:
                    session.io.pop(io_key, None)
                    del self.io_owner[io_key]

    def describe(self) -> str:
        return "; ".join(f"session #{s.index}: {s.used} of {s.usable} bytes used, {len(s.contexts)} "
                         f"context(s)" for s in self.sessions) or "no session open"


_PROCESS_SESSIONS: SessionPool | None = None


def process_sessions() -> SessionPool:
    """The cDSP sessions of this process (created at first use with QNNEMU_SESSION_VA_BYTES and
    QNNEMU_MAX_SESSIONS; an invalid value falls back to the documented defaults)."""
    global _PROCESS_SESSIONS
    with _RUNTIMES_LOCK:
        if _PROCESS_SESSIONS is None:
            try:
                _PROCESS_SESSIONS = SessionPool()
            except ValueError:
                _PROCESS_SESSIONS = SessionPool(SESSION_VA_BYTES, MAX_SESSIONS_PER_PROCESS)
        return _PROCESS_SESSIONS


def use_sessions(pool: SessionPool | None) -> SessionPool | None:
    """Replaces the process's sessions for contexts created from now on (None: a fresh pool at
    next use); returns the previous pool.  Contexts keep the pool they were placed in."""
    global _PROCESS_SESSIONS
    with _RUNTIMES_LOCK:
        previous, _PROCESS_SESSIONS = _PROCESS_SESSIONS, pool
        return previous


# ------------------------------------------------------------------------- the online model
class HtpRuntime:
    """The shared HTP of one device: resources, sessions, and the online scheduling API the
    execute path calls.

    ``request(client)`` -> True when the client may run now (it then holds its grant) else False
    (it waits; call again after a ``release`` or pre-emption); ``yield_point(client)`` at each
    op boundary -> True when a higher-priority waiter needs what it holds (the client then
    releases at this yield point and re-requests); ``release(client)`` when it ends.  The
    virtual clock ``now`` advances with ``advance``; every decision is appended to ``log``."""

    def __init__(self, soc: SocInfo, sessions: SessionPool | None = None):
        self.soc = soc
        self.device = Device.of(soc)
        self.sessions = sessions if sessions is not None else process_sessions()
        self.now = 0.0
        self.running: dict[str, Client] = {}
        self.waiting: dict[str, Client] = {}
        self.placement = Placement(self.device)
        self.log: list[tuple[float, str, str]] = []
        self.yield_counts: dict[str, int] = {}
        self._seq = itertools.count()
        self._lock = threading.RLock()

    def advance(self, dt: float) -> None:
        with self._lock:
            self.now += dt

    def _decide(self) -> list[tuple[Client, bool]]:
        ready = list(self.running.values()) + list(self.waiting.values())
        return admit(self.device, ready, set(self.running))

    def request(self, client: Client) -> bool:
        with self._lock:
            if client.name in self.running:
                return True
            if client.name not in self.waiting:
                client.seq = next(self._seq)
                self.waiting[client.name] = client
            chosen = {c.name for c, _ in self._decide()}
            # a client starts only when nobody running has to be evicted first
            if client.name in chosen and set(self.running) <= chosen:
                del self.waiting[client.name]
                self.running[client.name] = client
                self.placement.update([(c, h) for c, h in self._decide() if c.name in self.running])
                self.log.append((self.now, "acquire", client.name))
                return True
            self.log.append((self.now, "wait", client.name))
            return False

    def yield_point(self, client: Client) -> bool:
        with self._lock:
            if client.name not in self.running or not self.waiting:
                return False
            if client.name in {c.name for c, _ in self._decide()}:
                return False
            del self.running[client.name]
            self.placement.update([(c, h) for c, h in self._decide() if c.name in self.running])
            self.waiting[client.name] = client
            self.yield_counts[client.name] = self.yield_counts.get(client.name, 0) + 1
            self.log.append((self.now, "yield", client.name))
            return True

    def release(self, client: Client) -> None:
        with self._lock:
            self.running.pop(client.name, None)
            self.waiting.pop(client.name, None)
            self.placement.update([(c, h) for c, h in self._decide() if c.name in self.running])
            self.log.append((self.now, "release", client.name))

    def reset(self) -> None:
        """A SubSystem Restart: every client and mapping is gone (sessions re-open empty)."""
        with self._lock:
            self.running.clear()
            self.waiting.clear()
            self.placement = Placement(self.device)
            self.sessions = SessionPool(self.sessions.va_bytes, self.sessions.limit)
            self.log.append((self.now, "ssr", "*"))




def runtime_for(soc: SocInfo) -> HtpRuntime:
    """The process's shared HTP of a device (one per SoC model: every backend, context and graph
    on it shares it)."""
    with _RUNTIMES_LOCK:
        rt = _RUNTIMES.get(soc.soc_model)
        if rt is None:
            rt = _RUNTIMES[soc.soc_model] = HtpRuntime(soc)
        return rt


def reset_runtimes() -> None:
    """Forget every device's shared HTP (tests; a new process starts empty)."""
    with _RUNTIMES_LOCK:
        _RUNTIMES.clear()
