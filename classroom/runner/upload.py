"""What the runner reads of an upload: a zip of the kernel files, bounded, taken apart by name.

``make submit`` sends the kernel files as one zip archive (the request's
body). The runner reads the archive's directory and the members it expects,
nothing else, and refuses the upload (UploadRefused: an HTTP status and one
line) at the first thing outside the bounds:

- the body larger than ``max_upload`` bytes (413), counted as it arrives;
- not a zip, or a zip the standard library cannot read (400);
- more than ``MAX_MEMBERS`` members, a member under any other name than a
  kernel file of the registry (``w8a8.py``...: exact, at the top, so "../x",
  "/etc/x", "a/w8a8.py" and "w8a8.py/" are refused, never used as paths),
  a name twice, an encrypted member or another compression than stored or
  deflate (400);
- a member larger than ``MAX_FILE_BYTES`` unpacked, or all of them larger
  than ``MAX_TOTAL_BYTES`` (413), or packed more than ``MAX_RATIO`` times (a
  zip bomb, 400): checked on the sizes the directory gives, and the reading
  itself never unpacks more than those sizes (a member whose data do not
  match its directory entry fails its CRC: 400).

The files come back as bytes. Nothing here parses, imports or runs them: the
grader does, in its sandbox, as with any submission.
"""

from __future__ import annotations

import io
import zipfile
import zlib

from grader.submission import MAX_FILE_BYTES as GRADER_MAX_FILE_BYTES

MAX_UPLOAD_BYTES = 1 << 20          # the request body (--max-upload-kb)
MAX_MEMBERS = 8
MAX_FILE_BYTES = min(512 << 10, GRADER_MAX_FILE_BYTES)   # one kernel file, unpacked (the reference's: < 32 KiB)
MAX_TOTAL_BYTES = 1 << 20           # all members, unpacked
MAX_RATIO = 50                      # unpacked / packed, per member (Python source: about 4)


class UploadRefused(Exception):
    """An upload the runner will not take: the HTTP ``status`` and one line for the student."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _kib(n: int) -> str:
    return f"{n / 1024:.0f} KiB"


def read_kernel_files(body: bytes, wanted: tuple[str, ...], max_file: int = MAX_FILE_BYTES,
                      max_total: int = MAX_TOTAL_BYTES, max_ratio: float = MAX_RATIO,
                      max_members: int = MAX_MEMBERS) -> dict[str, bytes]:
    """{kernel file name: bytes} of an uploaded zip, or UploadRefused."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(body))
        infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError, NotImplementedError) as e:
        raise UploadRefused(400, f"the upload is not a readable zip archive ({type(e).__name__}); "
                                 "make submit sends one") from None
    if not infos:
        raise UploadRefused(400, "the archive is empty: no kernel file")
    if len(infos) > max_members:
        raise UploadRefused(400, f"the archive has {len(infos)} members; at most {max_members} "
                                 f"(the kernel files {', '.join(wanted)})")
    seen: set[str] = set()
    total = 0
    for info in infos:
        name = info.filename
        if name not in wanted:
            shown = name.encode("unicode_escape", "backslashreplace").decode("ascii")[:80]
            raise UploadRefused(400, f"unexpected member {shown!r}: the archive may hold only "
                                     f"{', '.join(wanted)}, at its top level")
        if name in seen:
            raise UploadRefused(400, f"{name} is in the archive twice")
        seen.add(name)
        if info.flag_bits & 0x1:
            raise UploadRefused(400, f"{name} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise UploadRefused(400, f"{name} uses compression method {info.compress_type}; "
                                     "only stored or deflate")
        if info.file_size > max_file:
            raise UploadRefused(413, f"{name} unpacks to {_kib(info.file_size)}; a kernel file may be "
                                     f"at most {_kib(max_file)}")
        total += info.file_size
        if total > max_total:
            raise UploadRefused(413, f"the archive unpacks to more than {_kib(max_total)}")
        if info.file_size > max_ratio * max(info.compress_size, 1):
            raise UploadRefused(400, f"{name} is packed {info.file_size / max(info.compress_size, 1):.0f} "
                                     f"times (at most {max_ratio:g}): refused as a zip bomb")
    files = {}
    for info in infos:
        try:
            with zf.open(info) as f:
                data = f.read(info.file_size + 1)   # never more than the directory says (zipfile stops there)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError,
                RuntimeError) as e:
            raise UploadRefused(400, f"{info.filename} cannot be unpacked ({type(e).__name__}: "
                                     f"{str(e)[:100]})") from None
        if len(data) != info.file_size:
            raise UploadRefused(400, f"{info.filename}: its data do not match the archive's directory")
        files[wanted[wanted.index(info.filename)]] = data   # the name we know, never the client's string
    return files

