# SPDX-License-Identifier: MIT
"""A small, strict PNG decoder (and, for its own test, an encoder), with zlib only: no PIL.

decode(data) checks the signature, every chunk's length and CRC, the chunk order (IHDR first,
PLTE before IDAT for palette images, consecutive IDATs, IEND last with nothing after it),
IHDR's fields (colour type and bit depth allowed together, compression 0, filter 0), inflates
the concatenated IDAT data, requires exactly height scanlines of the right length, undoes the
five filter types (None, Sub, Up, Average, Paeth), and returns an Image whose pixels are RGBA
8-bit tuples (16-bit samples are reduced to their high byte, grey replicated, palette looked up,
with tRNS alpha applied where present). Interlaced (Adam7) images are decoded as well.
Only what a heatmap needs is supported: ancillary chunks other than PLTE/tRNS are skipped.
"""

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"

# colour type -> (samples per pixel, allowed bit depths)
COLOUR_TYPES = {
    0: (1, (1, 2, 4, 8, 16)),   # grey
    2: (3, (8, 16)),            # RGB
    3: (1, (1, 2, 4, 8)),       # palette
    4: (2, (8, 16)),            # grey + alpha
    6: (4, (8, 16)),            # RGBA
}


class PNGError(Exception):
    pass


class Image:
    def __init__(self, width, height, bit_depth, colour_type, interlace, rows, chunks):
        self.width, self.height = width, height
        self.bit_depth, self.colour_type, self.interlace = bit_depth, colour_type, interlace
        self.rows = rows          # height lists of width (r, g, b, a) tuples, 8-bit
        self.chunks = chunks      # the chunk types in file order

    def pixels(self):
        for row in self.rows:
            for p in row:
                yield p


def _chunks(data):
    if data[:8] != SIGNATURE:
        raise PNGError("bad signature %r" % data[:8])
    pos = 8
    out = []
    while True:
        if pos + 8 > len(data):
            raise PNGError("file ends inside a chunk header at byte %d" % pos)
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        if length > 0x7FFFFFFF:
            raise PNGError("chunk length %d too large" % length)
        end = pos + 8 + length
        if end + 4 > len(data):
            raise PNGError("chunk %r runs past the end of the file" % ctype)
        body = data[pos + 8:end]
        (crc,) = struct.unpack(">I", data[end:end + 4])
        if zlib.crc32(ctype + body) & 0xFFFFFFFF != crc:
            raise PNGError("bad CRC in chunk %r" % ctype)
        if not all(65 <= c <= 90 or 97 <= c <= 122 for c in ctype):
            raise PNGError("bad chunk type %r" % ctype)
        out.append((ctype, body))
        pos = end + 4
        if ctype == b"IEND":
            if pos != len(data):
                raise PNGError("%d bytes after IEND" % (len(data) - pos))
            return out


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    if pb <= pc:
        return b
    return c


def unfilter(raw, width, height, bits_per_pixel):
    """Undoes the per-scanline filters; returns a list of `height` bytearrays (unfiltered)."""
    stride = (width * bits_per_pixel + 7) // 8
    bpp = max(1, bits_per_pixel // 8)  # the filter's "bytes per complete pixel", at least 1
    if len(raw) != height * (stride + 1):
        raise PNGError("image data is %d bytes, expected %d (%d scanlines of 1 + %d)"
                       % (len(raw), height * (stride + 1), height, stride))
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 0:
            pass
        elif ftype == 1:  # Sub
            for x in range(bpp, stride):
                line[x] = (line[x] + line[x - bpp]) & 0xFF
        elif ftype == 2:  # Up
            for x in range(stride):
                line[x] = (line[x] + prev[x]) & 0xFF
        elif ftype == 3:  # Average
            for x in range(stride):
                left = line[x - bpp] if x >= bpp else 0
                line[x] = (line[x] + ((left + prev[x]) >> 1)) & 0xFF
        elif ftype == 4:  # Paeth
            for x in range(stride):
                left = line[x - bpp] if x >= bpp else 0
                upleft = prev[x - bpp] if x >= bpp else 0
                line[x] = (line[x] + _paeth(left, prev[x], upleft)) & 0xFF
        else:
            raise PNGError("unknown filter type %d on scanline %d" % (ftype, y))
        rows.append(line)
        prev = line
    return rows


def _samples(line, width, samples, depth):
    """The samples of one unfiltered scanline as ints."""
    n = width * samples
    if depth == 8:
        return list(line[:n])
    if depth == 16:
        return [(line[2 * i] << 8) | line[2 * i + 1] for i in range(n)]
    per_byte = 8 // depth
    mask = (1 << depth) - 1
    out = []
    for i in range(n):
        byte = line[i // per_byte]
        shift = 8 - depth * (i % per_byte + 1)
        out.append((byte >> shift) & mask)
    return out


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def decode(data):
    chunks = _chunks(data)
    types = [c[0] for c in chunks]
    if types[0] != b"IHDR" or types.count(b"IHDR") != 1:
        raise PNGError("IHDR is not the first and only header chunk: %r" % types)
    ihdr = chunks[0][1]
    if len(ihdr) != 13:
        raise PNGError("IHDR is %d bytes" % len(ihdr))
    width, height, depth, ctype, comp, filt, interlace = struct.unpack(">IIBBBBB", ihdr)
    if width == 0 or height == 0 or width > 0x7FFFFFFF or height > 0x7FFFFFFF:
        raise PNGError("size %dx%d" % (width, height))
    if ctype not in COLOUR_TYPES or depth not in COLOUR_TYPES[ctype][1]:
        raise PNGError("colour type %d with bit depth %d" % (ctype, depth))
    if comp != 0 or filt != 0 or interlace not in (0, 1):
        raise PNGError("compression %d, filter %d, interlace %d" % (comp, filt, interlace))
    idat_at = [i for i, t in enumerate(types) if t == b"IDAT"]
    if not idat_at:
        raise PNGError("no IDAT chunk")
    if idat_at != list(range(idat_at[0], idat_at[-1] + 1)):
        raise PNGError("IDAT chunks are not consecutive: %r" % types)
    palette = None
    trns = None
    for i, (t, body) in enumerate(chunks):
        if t == b"PLTE":
            if i > idat_at[0] or len(body) % 3 or not 0 < len(body) <= 768:
                raise PNGError("bad PLTE (%d bytes, at chunk %d)" % (len(body), i))
            palette = [tuple(body[j:j + 3]) for j in range(0, len(body), 3)]
        elif t == b"tRNS":
            trns = body
    if ctype == 3 and palette is None:
        raise PNGError("palette image without PLTE")
    z = zlib.decompressobj()
    raw = z.decompress(b"".join(chunks[i][1] for i in idat_at))
    if not z.eof:
        raise PNGError("the zlib stream in IDAT is incomplete")
    if z.unused_data:
        raise PNGError("%d bytes after the zlib stream" % len(z.unused_data))
    samples = COLOUR_TYPES[ctype][0]
    bits = samples * depth

    def to_rgba(vals, x):
        s = vals[x * samples:(x + 1) * samples]
        hi = (lambda c: c >> 8) if depth == 16 else (lambda c: c * 255 // ((1 << depth) - 1))
        if ctype == 0:
            g = hi(s[0])
            a = 0 if trns is not None and len(trns) == 2 and s[0] == struct.unpack(">H", trns)[0] else 255
            return (g, g, g, a)
        if ctype == 2:
            a = 255
            if trns is not None and len(trns) == 6 and tuple(s) == struct.unpack(">HHH", trns):
                a = 0
            return (hi(s[0]), hi(s[1]), hi(s[2]), a)
        if ctype == 3:
            if s[0] >= len(palette):
                raise PNGError("palette index %d beyond %d entries" % (s[0], len(palette)))
            r, g, b = palette[s[0]]
            a = trns[s[0]] if trns is not None and s[0] < len(trns) else 255
            return (r, g, b, a)
        if ctype == 4:
            return (hi(s[0]), hi(s[0]), hi(s[0]), hi(s[1]))
        return (hi(s[0]), hi(s[1]), hi(s[2]), hi(s[3]))

    def row_rgba(vals, w):
        # Fast paths for the usual 8-bit images; to_rgba for the rest.
        if depth == 8 and trns is None:
            if ctype == 2:
                return list(zip(vals[0::3], vals[1::3], vals[2::3], [255] * w))
            if ctype == 6:
                return list(zip(vals[0::4], vals[1::4], vals[2::4], vals[3::4]))
            if ctype == 0:
                return [(g, g, g, 255) for g in vals]
        return [to_rgba(vals, x) for x in range(w)]

    if interlace == 0:
        lines = unfilter(raw, width, height, bits)
        rows = []
        for line in lines:
            rows.append(row_rgba(_samples(line, width, samples, depth), width))
    else:
        rows = [[None] * width for _ in range(height)]
        pos = 0
        for x0, y0, dx, dy in ADAM7:
            w = (width - x0 + dx - 1) // dx if width > x0 else 0
            h = (height - y0 + dy - 1) // dy if height > y0 else 0
            if w == 0 or h == 0:
                continue
            size = h * ((w * bits + 7) // 8 + 1)
            lines = unfilter(raw[pos:pos + size], w, h, bits)
            pos += size
            for j, line in enumerate(lines):
                vals = _samples(line, w, samples, depth)
                for i in range(w):
                    rows[y0 + j * dy][x0 + i * dx] = to_rgba(vals, i)
        if pos != len(raw):
            raise PNGError("interlaced image data is %d bytes, expected %d" % (len(raw), pos))
    return Image(width, height, depth, ctype, interlace, rows, types)


def decode_file(path):
    with open(path, "rb") as f:
        return decode(f.read())


# --- an encoder, to test the decoder on every filter type, colour type and bit depth -------------

def _chunk(ctype, body):
    return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", zlib.crc32(ctype + body) & 0xFFFFFFFF)


def _filter_line(ftype, line, prev, bpp):
    out = bytearray(len(line))
    for x in range(len(line)):
        left = line[x - bpp] if x >= bpp else 0
        up = prev[x]
        upleft = prev[x - bpp] if x >= bpp else 0
        pred = (0, left, up, (left + up) >> 1, _paeth(left, up, upleft))[ftype]
        out[x] = (line[x] - pred) & 0xFF
    return out


def encode(samples_rows, width, depth, ctype, palette=None, filters=(0, 1, 2, 3, 4), chunk_split=None,
           interlace=0):
    """PNG bytes for rows of raw sample values (ints), filter type of row y = filters[y % len]
    (counted per pass when interlaced)."""
    samples = COLOUR_TYPES[ctype][0]
    height = len(samples_rows)
    if interlace:
        raw = bytearray()
        for x0, y0, dx, dy in ADAM7:
            sub = [[v for x in range(x0, width, dx) for v in row[x * samples:(x + 1) * samples]]
                   for row in samples_rows[y0::dy]]
            if sub and sub[0]:
                raw += _filtered(sub, len(sub[0]) // samples, depth, samples, filters)
    else:
        raw = _filtered(samples_rows, width, depth, samples, filters)
    z = zlib.compress(bytes(raw), 9)
    out = SIGNATURE + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, ctype, 0, 0, interlace))
    if palette is not None:
        out += _chunk(b"PLTE", b"".join(bytes(p) for p in palette))
    parts = [z] if not chunk_split else [z[i:i + chunk_split] for i in range(0, len(z), chunk_split)]
    for p in parts:
        out += _chunk(b"IDAT", p)
    return out + _chunk(b"IEND", b"")


def _filtered(samples_rows, width, depth, samples, filters):
    bits = samples * depth
    bpp = max(1, bits // 8)
    raw = bytearray()
    prev = bytearray((width * bits + 7) // 8)
    for y, vals in enumerate(samples_rows):
        line = bytearray()
        if depth == 16:
            for v in vals:
                line += struct.pack(">H", v)
        elif depth == 8:
            line += bytes(vals)
        else:
            per_byte = 8 // depth
            acc = bytearray((len(vals) + per_byte - 1) // per_byte)
            for i, v in enumerate(vals):
                acc[i // per_byte] |= v << (8 - depth * (i % per_byte + 1))
            line += acc
        ftype = filters[y % len(filters)]
        raw.append(ftype)
        raw += _filter_line(ftype, line, prev, bpp)
        prev = line
    return raw
