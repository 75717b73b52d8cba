"""Remote errors: which are worth retrying, retrying them with backoff (``call``, the one retry
loop), a reader that resumes where a transient error struck (it retries through ``call`` too), and
redaction for every URL that goes into a message.

Used by imagenet_shards.pipeline.storage.fs (the one I/O layer) for every remote operation. Nothing here imports a
storage backend: errors are recognised by their HTTP status (aiohttp, botocore, requests style),
their type name or errno, anywhere in the exception's cause chain.
"""

from __future__ import annotations

import errno
import io
import logging
import random
import re
import time
from dataclasses import dataclass

log = logging.getLogger("imagenet_shards.pipeline.storage.fs")


# ----------------------------------------------------------------------------- redaction

# to the last '@' of the URL: a password with an unescaped '/' in it must not leak (an '@' in a path
# over-redacts the host, which is the safe side)
_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^\s'\"<>@]*@")
_SECRET_PARAMS = re.compile(
    r"(?i)([?&;](?:x-amz-signature|x-amz-credential|x-amz-security-token|awsaccesskeyid|signature|"
    r"x-goog-signature|x-goog-credential|googleaccessid|sig|se|st|sv|skoid|sktid|token|access_token|"
    r"id_token|auth|key|api_key|apikey|secret|password|passwd|credential|policy)=)[^&\s#'\"]*")


def redact(text) -> str:
    """`text` (a URL or a message holding URLs) without user:password@ and signed-URL secrets."""
    text = _USERINFO.sub(r"\1***@", str(text))
    return _SECRET_PARAMS.sub(r"\1REDACTED", text)


# ----------------------------------------------------------------------------- errors and retries

TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_TRANSIENT_ERRNO = frozenset({errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED, errno.ETIMEDOUT,
                              errno.EPIPE, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN,
                              errno.EBUSY, errno.EAGAIN, getattr(errno, "EREMOTEIO", 121)})


class StorageError(OSError):
    """A remote read or write failed for good; the message names the (redacted) URL and why."""


@dataclass(frozen=True)
class RetryPolicy:
    """Up to `attempts` tries of one operation; waits grow 2x from `base_s` up to `max_s` (jittered)."""

    attempts: int = 8
    base_s: float = 0.5
    max_s: float = 30.0

    def delay(self, failures: int) -> float:
        d = min(self.max_s, self.base_s * 2 ** (failures - 1))
        return d / 2 + random.random() * d / 2


_retry_policy = RetryPolicy()


def set_retry_policy(policy: RetryPolicy) -> None:
    """Process-wide retry policy (inherited by forked workers)."""
    global _retry_policy
    _retry_policy = policy


def retry_policy() -> RetryPolicy:
    return _retry_policy


def _chain(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def http_status(exc) -> int | None:
    """The HTTP status an exception carries (aiohttp, botocore, requests-style), else None."""
    for e in _chain(exc):
        status = getattr(e, "status", None)
        if isinstance(status, int) and 100 <= status <= 599:
            return status
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(code, int):
                return code
        code = getattr(response, "status_code", None)
        if isinstance(code, int):
            return code
    return None


_TRANSPORT_ERRORS = ("ClientPayloadError", "ServerDisconnectedError", "ClientConnectionError", "ClientOSError",
                     "ServerTimeoutError", "ClientConnectorError", "IncompleteRead", "ProtocolError",
                     "FSTimeoutError", "EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError",
                     "ConnectTimeoutError", "ResponseStreamingError")


def is_transient(exc) -> bool:
    """True for errors worth retrying: HTTP 5xx/408/429, connection resets/refusals, timeouts, a body
    cut short. The whole cause chain counts: a status in it decides first (fsspec's http turns a 503
    on HEAD, or a refused connection, into a FileNotFoundError caused by the real error); then any
    transport error in it; a 404/403, or anything unrecognised, is permanent."""
    status = http_status(exc)
    if status is not None:
        return status in TRANSIENT_STATUS or status >= 500
    for e in _chain(exc):
        if isinstance(e, (ConnectionError, TimeoutError)) or type(e).__name__ in _TRANSPORT_ERRORS:
            return True
        if isinstance(e, OSError) and not isinstance(e, (FileNotFoundError, PermissionError)) \
                and e.errno in _TRANSIENT_ERRNO:
            return True
    return False


def _reason(exc) -> str:
    status = http_status(exc)
    if isinstance(exc, FileNotFoundError):
        return "not found" + (f" (HTTP {status})" if status else "")
    if isinstance(exc, PermissionError):
        return "access denied: check the credentials and the bucket policy" + (f" (HTTP {status})" if status else "")
    text = redact(str(exc)).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


def named_error(exc, url, action: str = "read") -> OSError:
    """An OSError of the same kind (FileNotFoundError, PermissionError, ...) saying which URL and why."""
    msg = f"cannot {action} {redact(url)}: {_reason(exc)}"
    kind = type(exc) if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError,
                                          NotADirectoryError)) else StorageError
    return kind(msg)


def call(fn, url, *, action: str = "read", policy: RetryPolicy | None = None, sleep=None,
         position=None, before_retry=None):
    """fn() with retries on transient errors: the one retry loop of the project (every remote call,
    and the resuming reader, go through it).

    A permanent error (or running out of tries) is raised as `named_error` (the original exception
    is not chained: its text may hold secrets); a StorageError from fn is already final and passes
    through. `position()`, if given, says at which byte of the object the error struck (for the
    messages); `before_retry()`, if given, runs after the wait and before the next try (the reader
    drops its broken connection there)."""
    policy = policy or _retry_policy
    failures = 0
    while True:
        try:
            return fn()
        except StorageError:
            raise
        except Exception as e:  # noqa: BLE001 - classified right here
            failures += 1
            if not is_transient(e):
                raise named_error(e, url, action) from None
            at = f" at byte {position()}" if position is not None else ""
            if failures >= policy.attempts:
                err = named_error(e, url, action)
                where = f"at byte {position()}; " if position is not None else ""
                raise StorageError(f"{err} ({where}still failing after {failures} tries)") from None
            wait = policy.delay(failures)
            (log.warning if failures > 1 else log.info)(
                "transient error on %s%s (%s); retry %d/%d in %.2f s", redact(url), at, _reason(e), failures,
                policy.attempts - 1, wait)
            (sleep or time.sleep)(wait)
            if before_retry is not None:
                before_retry()


# ----------------------------------------------------------------------------- reading

class RetryingReader(io.RawIOBase):
    """A read-only file over a remote object that survives transient errors: on one, it reopens the
    object (with backoff) and continues at the byte where it stopped (seek, or read past for a
    stream), so the bytes handed out are exactly the object's bytes, once each. A size that changes
    between opens means the object was replaced: StorageError, not mixed bytes.

    `open_fresh()` opens the object anew at byte 0 (an fsspec file: `.size`, `.seek`, `.read`)."""

    def __init__(self, url: str, open_fresh, policy: RetryPolicy | None = None):
        super().__init__()
        self.url, self.policy = str(url), policy or _retry_policy
        self._open_at_zero = open_fresh
        self.pos = 0
        self.reopens = 0
        self._f = None
        self._size = None
        self._f = call(self._open_at_zero, self.url, policy=self.policy)
        self._size = getattr(self._f, "size", None)

    def _reopen(self):
        f = self._open_at_zero()
        size = getattr(f, "size", None)
        if self._size is not None and size is not None and size != self._size:
            f.close()
            raise StorageError(f"{redact(self.url)} changed while it was being read ({self._size} -> {size} "
                               "bytes); start again")
        try:
            f.seek(self.pos)
        except (ValueError, OSError, io.UnsupportedOperation):  # a stream: read up to where we were
            left = self.pos
            while left:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    raise ConnectionResetError("stream ended before the resume point")
                left -= len(chunk)
        return f

    def _drop_connection(self) -> None:
        """Before a retry: close the broken file; the next try reopens at self.pos."""
        try:
            if self._f is not None:
                self._f.close()
        except Exception:  # noqa: BLE001 - the old connection is gone anyway
            pass
        self._f = None
        self.reopens += 1

    def _with_retries(self, op):
        return call(op, self.url, policy=self.policy, position=lambda: self.pos,
                    before_retry=self._drop_connection)

    def read(self, n: int = -1) -> bytes:
        def op():
            if self._f is None:
                self._f = self._reopen()
            data = self._f.read(n) if n is not None and n >= 0 else self._f.read()
            if not data and n != 0 and self._size is not None and self.pos < self._size:
                raise _TruncatedRead(f"connection ended at byte {self.pos} of {self._size}")
            return data

        data = self._with_retries(op)
        self.pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.pos
        elif whence == io.SEEK_END:
            if self._size is None:
                raise io.UnsupportedOperation("size unknown: cannot seek from the end")
            offset += self._size
        if offset < 0:
            raise ValueError("negative seek position")
        if offset != self.pos:
            self.pos = offset
            if self._f is not None:
                try:
                    self._f.seek(offset)
                except (ValueError, OSError, io.UnsupportedOperation):  # a stream: reopen at the next read
                    self._f.close()
                    self._f = None
        return self.pos

    def tell(self) -> int:
        return self.pos

    @property
    def size(self) -> int | None:
        return self._size

    def close(self) -> None:
        if self._f is not None:
            try:
                self._f.close()
            except Exception:  # noqa: BLE001 - closing a broken connection must not mask the real error
                pass
            self._f = None
        super().close()


class _TruncatedRead(ConnectionError):
    """The connection ended before the object did (a server or proxy closed it cleanly mid-body)."""


__all__ = ["RetryPolicy", "RetryingReader", "StorageError", "call", "http_status", "is_transient", "named_error",
           "redact", "retry_policy", "set_retry_policy"]
