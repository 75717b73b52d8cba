"""The one I/O layer: every byte the project reads or writes outside the process goes through here.

``fs`` opens, lists and writes local paths and fsspec URLs (s3://, gs://, http(s)://, ...);
``retry`` classifies errors, retries transient ones and resumes reads at the byte where they
stopped, and redacts credentials from every URL it shows; ``atomic`` writes local files so that a
crash never leaves a half-written one under the final name; ``units`` reads and prints sizes;
``forks`` keeps forked workers off their parent's connections (``fs`` installs it); ``readahead``
reads a known sequence of remote objects through parallel ranged reads, a bounded window ahead.
Callers use this facade (``storage.open_url``); tests that replace internals patch ``fs``/``retry``.
"""

from imagenet_shards.pipeline.storage.fs import (READ_ONLY, UNLISTABLE, ObjectInfo, add_storage_option,
                                                 apply_storage_options, can_list, can_write, exists, fs_for, info,
                                                 is_remote, isdir, join, list_details, listdir, local_path, makedirs,
                                                 multipart_etag, open_url, options_snapshot, parse_storage_options,
                                                 protocol, put_file, read_bytes, read_range, remove, restore_options, set_options,
                                                 size, uploads_in_parts, write_bytes)
from imagenet_shards.pipeline.storage.readahead import ReadAhead, ReadAheadPolicy, ReadCounters
from imagenet_shards.pipeline.storage.units import human_bytes, parse_size, positive_size
from imagenet_shards.pipeline.storage.retry import (RetryPolicy, RetryingReader, StorageError, call, is_transient,
                                                    named_error, redact, retry_policy, set_retry_policy)

__all__ = ["human_bytes", "parse_size", "positive_size", "ObjectInfo", "RetryPolicy", "RetryingReader", "StorageError", "READ_ONLY", "UNLISTABLE", "add_storage_option", "apply_storage_options", "call", "can_list", "can_write", "exists", "fs_for", "info", "is_remote", "is_transient", "isdir", "join", "list_details", "listdir", "local_path", "makedirs", "multipart_etag", "named_error", "open_url", "options_snapshot", "parse_storage_options", "protocol", "put_file", "read_bytes", "read_range", "ReadAhead", "ReadAheadPolicy", "ReadCounters", "redact", "remove", "restore_options", "retry_policy", "set_options", "set_retry_policy", "size", "uploads_in_parts", "write_bytes"]
