"""The soak's keys and values, shared by its Python clients and its checker; the agent-library
client (soak_agent_client.cc) makes the same ones.

A value is its key, "#", the key's 64-bit FNV-1a hash in hex, then dots up to VALUE_BYTES:
a value read back under another key, cut short or altered does not match.
"""

VALUE_BYTES = 96


def key_of(kind, task, round_):
    return f"soak/{kind}/{task}/{round_}"


def fnv1a64(text):
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def value_of(key):
    head = f"{key}#{fnv1a64(key):016x}"
    return head + "." * max(0, VALUE_BYTES - len(head))
