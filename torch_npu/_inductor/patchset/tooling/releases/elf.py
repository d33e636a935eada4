"""Read what a shared object imports, exports, needs and names: a small ELF64 little-endian reader.

Used to read a torch_npu wheel's own binaries (the host ACL library is built from what they ask for),
without binutils' text formats in between. Pure functions over a file's bytes; nothing is loaded.

API:
    needed(path) -> list[str]                          DT_NEEDED entries, in order
    dynamic_symbols(path) -> (defined, undefined)      global/weak dynamic symbols (names without @version)
    rodata_strings(path) -> set[str]                   NUL-terminated ASCII strings of the .rodata* sections
"""
from __future__ import annotations

import struct
from functools import lru_cache
from pathlib import Path

__all__ = ["ElfError", "needed", "dynamic_symbols", "rodata_strings"]

_SHT_NOBITS, _SHT_DYNSYM, _SHT_DYNAMIC = 8, 11, 6
_DT_NEEDED = 1
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10


class ElfError(ValueError):
    """Not an ELF64 little-endian shared object this reader understands."""


class _Elf:
    def __init__(self, path: Path):
        self.path = path
        self.data = path.read_bytes()
        d = self.data
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise ElfError(f"{path}: not an ELF64 little-endian file")
        shoff = struct.unpack_from("<Q", d, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
        # (name_off, type, flags, addr, offset, size, link, info, addralign, entsize)
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
        names_off = self.sections[shstrndx][4]
        self.names = [self._cstr(names_off + s[0]) for s in self.sections]

    def _cstr(self, off: int) -> str:
        end = self.data.index(b"\0", off)
        return self.data[off:end].decode("latin-1")

    def body(self, i: int) -> bytes:
        s = self.sections[i]
        return b"" if s[1] == _SHT_NOBITS else self.data[s[4]:s[4] + s[5]]

    def of_type(self, sh_type: int) -> list[int]:
        return [i for i, s in enumerate(self.sections) if s[1] == sh_type]


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> _Elf:  # noqa: ARG001 - mtime keys the cache
    return _Elf(Path(path))


def _elf(path) -> _Elf:
    p = Path(path)
    return _load(str(p.resolve()), p.stat().st_mtime)


def needed(path) -> list[str]:
    """The DT_NEEDED names of ``path``, in the order the dynamic section lists them."""
    e = _elf(path)
    out = []
    for i in e.of_type(_SHT_DYNAMIC):
        strtab = e.sections[e.sections[i][6]][4]
        body = e.body(i)
        for off in range(0, len(body) - 15, 16):
            tag, val = struct.unpack_from("<qQ", body, off)
            if tag == 0:
                break
            if tag == _DT_NEEDED:
                out.append(e._cstr(strtab + val))
    return out


def dynamic_symbols(path) -> tuple[set[str], set[str]]:
    """``(defined, undefined)``: global, weak and unique names of the dynamic symbol table. Undefined weak
    names (``__gmon_start__`` and the like, which may stay unresolved) are left out."""
    e = _elf(path)
    defined, undefined = set(), set()
    for i in e.of_type(_SHT_DYNSYM):
        strtab = e.sections[e.sections[i][6]][4]
        body = e.body(i)
        for off in range(24, len(body) - 23, 24):  # entry 0 is the null symbol
            name_off, info, _other, shndx = struct.unpack_from("<IBBH", body, off)
            bind = info >> 4
            if bind not in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE) or name_off == 0:
                continue
            name = e._cstr(strtab + name_off)
            if shndx != 0:
                defined.add(name)
            elif bind == _STB_GLOBAL:
                undefined.add(name)
    return defined, undefined


def rodata_strings(path) -> set[str]:
    """Every NUL-terminated ASCII string of the ``.rodata*`` sections (the literals the code names)."""
    e = _elf(path)
    out: set[str] = set()
    for i, name in enumerate(e.names):
        if name.startswith(".rodata"):
            for part in e.body(i).split(b"\0"):
                if part and part.isascii():
                    out.add(part.decode("ascii"))
    return out
