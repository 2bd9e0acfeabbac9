#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: corpus/<target>/<name>.

Valid frames follow src/bootstrap/wire.cc's encoders byte for byte (all
integers little-endian); the rest are truncated or garbled copies of them.
Run from anywhere: python3 tests/fuzz/make_seeds.py. The seeds are small and
committed; inputs a fuzzing run discovers are not.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

ID_MAGIC = b"BRAIDUID"
HELLO_MAGIC = 0x31484252  # "BRH1"
REPLY_MAGIC = 0x31524252  # "BRR1"
PEER_MAGIC = 0x31504252   # "BRP1"
RING_TAG = 0xFFFFFFFF


def u16(v):
    return struct.pack("<H", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def secret(seed):
    return bytes((seed * 37 + i * 11) & 0xFF for i in range(32))


def addr4(a, b, c, d, port):
    return u16(4) + u16(port) + bytes([a, b, c, d]) + bytes(12)


def addr6(raw16, port):
    return u16(6) + u16(port) + raw16


NO_ADDR = u16(0) + u16(0) + bytes(16)
V6_LOOPBACK = bytes(15) + b"\x01"
V6_LINK_LOCAL = b"\xfe\x80" + bytes(13) + b"\x01"


def unique_id(flags, addr, sec, layout=1):
    body = ID_MAGIC + u32(layout) + u32(flags) + addr + sec
    return body + bytes(128 - len(body))


def hello(sec, nranks, n_ids, id_index, first_root, first_secret, ranks):
    out = u32(HELLO_MAGIC) + u32(1) + sec + u32(nranks) + u32(n_ids) + u32(id_index) + u32(len(ranks))
    out += first_root + first_secret
    for rank, addr in ranks:
        out += u32(rank) + addr
    return out


def root_reply(result, message, addrs):
    return u32(REPLY_MAGIC) + u32(result) + u32(len(message)) + u32(len(addrs)) + message + b"".join(addrs)


def peer_hello(sec, from_rank, tag):
    return u32(PEER_MAGIC) + sec + u32(from_rank) + u32(tag)


def seeds():
    s = {}
    # ---- unique id
    t = s.setdefault("fuzz_unique_id", {})
    t["valid_v4"] = unique_id(0, addr4(10, 0, 0, 1, 29500), secret(1))
    t["valid_v6_root_on_rank0"] = unique_id(1, addr6(V6_LINK_LOCAL, 40000), secret(2))
    t["bad_magic"] = b"NCCLUID!" + t["valid_v4"][8:]
    t["bad_layout"] = unique_id(0, addr4(10, 0, 0, 1, 29500), secret(1), layout=2)
    t["unknown_flags"] = unique_id(6, addr4(10, 0, 0, 1, 29500), secret(1))
    t["no_root"] = unique_id(0, NO_ADDR, secret(3))
    t["port_zero"] = unique_id(0, addr4(127, 0, 0, 1, 0), secret(3))
    t["truncated"] = t["valid_v4"][:18]  # zero-padded: port 0
    # ---- hello
    t = s.setdefault("fuzz_hello", {})
    t["rank"] = hello(secret(4), 4, 1, 0, NO_ADDR, bytes(32), [(2, addr4(192, 168, 1, 7, 41000))])
    t["subroot_slice"] = hello(secret(5), 8, 2, 1, addr4(10, 1, 0, 1, 29500), secret(6),
                               [(4, addr4(10, 1, 0, 5, 50000)), (5, addr6(V6_LOOPBACK, 50001)),
                                (6, addr4(10, 1, 0, 7, 50002))])
    t["truncated_header"] = t["rank"][:50]
    t["length_mismatch"] = t["subroot_slice"][:-5]
    t["count_above_nranks"] = hello(secret(4), 1, 1, 0, NO_ADDR, bytes(32),
                                    [(0, addr4(1, 2, 3, 4, 5)), (0, addr4(1, 2, 3, 4, 6))])
    t["rank_out_of_range"] = hello(secret(4), 2, 1, 0, NO_ADDR, bytes(32), [(9, addr4(1, 2, 3, 4, 5))])
    t["missing_first_root"] = hello(secret(4), 4, 2, 1, NO_ADDR, bytes(32), [(3, addr4(1, 2, 3, 4, 5))])
    t["wrong_version"] = t["rank"][:4] + u32(7) + t["rank"][8:]
    # ---- root reply
    t = s.setdefault("fuzz_root_reply", {})
    t["success"] = root_reply(0, b"", [addr4(10, 0, 0, i, 40000 + i) for i in range(1, 5)])
    t["success_v6"] = root_reply(0, b"", [addr6(V6_LOOPBACK, 41000), addr6(V6_LINK_LOCAL, 41001)])
    t["failure"] = root_reply(5, b"rank 3 sent a hello with the wrong secret", [])
    t["unknown_result"] = root_reply(99, b"", [])
    t["message_too_long"] = u32(REPLY_MAGIC) + u32(0) + u32(5000) + u32(0)
    t["truncated_body"] = t["success"][:-7]
    t["header_only"] = t["success"][:16]
    t["bad_address"] = root_reply(0, b"", [addr4(10, 0, 0, 1, 0)])
    # ---- peer frames: a peer hello, or 8 bytes of expected length + a message header
    t = s.setdefault("fuzz_peer_frames", {})
    t["peer_hello_ring"] = peer_hello(secret(7), 3, RING_TAG)
    t["peer_hello_tag"] = peer_hello(secret(8), 0, 17)
    t["peer_hello_bad_magic"] = u32(HELLO_MAGIC) + t["peer_hello_ring"][4:]
    t["peer_hello_short"] = t["peer_hello_ring"][:-1]
    t["header_match"] = u64(4096) + u64(4096)
    t["header_mismatch"] = u64(4096) + u64(1 << 40)
    t["header_short"] = u64(8) + u64(8)[:5]
    t["header_long"] = u64(0) + u64(0) + b"\x00"
    return s


def main():
    for target, files in seeds().items():
        d = os.path.join(CORPUS, target)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(files)} seeds")


if __name__ == "__main__":
    main()
