"""The CUDA streams and events of `--gpu-decode`'s decode thread, in one place (no-ops on the CPU).

Why two streams and no drain (pytorch/vision#9606, torchcodec#1634): torchvision's `decode_jpeg`
allocates the decoded images on the caller's current stream, and nvJPEG's hardware engine writes
them without waiting for that stream, so a block the caching allocator recycled on a stream with
queued kernels may still be in use by them. The decode therefore runs with a stream current that
runs no kernel at all (`decoding`): no block of its pool can be in use by queued work. The crop runs
on a second stream (`cropping`) behind the decode, the decoded images `record_stream`ed onto it, so
their blocks return to the decode stream's pool only after the crop has read them. A batch reaches
the consumer with an event (`done`, `hand_over`). `CropTimer` reads the crop's time from CUDA events
once they have passed, so the timing needs no host sync either.
"""

from __future__ import annotations

import contextlib
import time

import torch


class StreamOps:
    """The decode thread's streams and events, in one place (no-ops on the CPU; see the module
    docstring): `decoding()` makes the kernel-free decode stream current, `cropping(images)` the crop
    stream, ordered after the decode and holding the images' memory; `done()` marks a batch's end."""

    def __init__(self, device: torch.device):
        self.device = device
        cuda = device.type == "cuda"
        self.decode_stream = torch.cuda.Stream(device) if cuda else None
        self.crop_stream = torch.cuda.Stream(device) if cuda else None

    def context(self):
        """Make the device current in the calling (decode) thread."""
        return torch.cuda.device(self.device) if self.decode_stream is not None else contextlib.nullcontext()

    def decoding(self):
        """The decode stream current: where decode_jpeg allocates, and nothing else runs."""
        return torch.cuda.stream(self.decode_stream) if self.decode_stream is not None else contextlib.nullcontext()

    def cropping(self, images):
        """The crop stream current, after the decode stream's work so far; `images` (made on the decode
        stream) stay reserved until the crop stream's work on them is done."""
        if self.crop_stream is None:
            return contextlib.nullcontext()
        self.crop_stream.wait_stream(self.decode_stream)
        for t in images:
            if t is not None:
                t.record_stream(self.crop_stream)
        return torch.cuda.stream(self.crop_stream)

    def done(self):
        """An event marking the end of the work queued so far on the crop stream."""
        if self.crop_stream is None:
            return None
        event = torch.cuda.Event()
        event.record(self.crop_stream)
        return event

    def timer(self) -> "CropTimer":
        return CropTimer(self.crop_stream)

    def hand_over(self, tensors, event) -> None:
        """In the consumer's thread: its current stream waits for `event`, and the tensors' memory
        stays reserved until that stream's work on them is done."""
        if event is None:
            return
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for t in tensors:
            t.record_stream(current)


class CropTimer:
    """Seconds of crop work: CUDA event pairs read once they have passed (no host sync), or the
    host's clock on the CPU, where the work is done when the call returns."""

    def __init__(self, stream):
        self.stream, self.pending, self.seconds = stream, [], 0.0

    def start(self):
        if self.stream is None:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(self.stream)
        return event

    def stop(self, start) -> None:
        if self.stream is None:
            self.seconds += time.perf_counter() - start
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record(self.stream)
        self.pending.append((start, end))
        while self.pending and self.pending[0][1].query():
            a, b = self.pending.pop(0)
            self.seconds += a.elapsed_time(b) / 1000

    def finish(self) -> float:
        """All seconds so far (waits for the last pairs: call at the epoch's end)."""
        for a, b in self.pending:
            b.synchronize()
            self.seconds += a.elapsed_time(b) / 1000
        self.pending = []
        return self.seconds
