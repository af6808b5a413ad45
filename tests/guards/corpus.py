"""Positive and negative samples per built-in detector: each positive must be found whole (in a
sentence), each negative must leave the detector silent. The near misses are the point: a bad
checksum, one digit short, a reserved range, a shape that is almost a key.

``bench/guards_corpus.py`` prints each detector's precision and recall over this corpus.
"""

from __future__ import annotations

from switchyard.guards.detectors import BUILT_IN
from switchyard.guards.scan import scan

# A short RSA private-key block (a throwaway, made for this corpus; not a key anyone uses).
PEM = ("-----BEGIN RSA PRIVATE KEY-----\n"
       "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
       "KUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQJAIJLixBy2qpFoS4DSmoEm\n"
       "o3qGy0t6z09AIJtH+5OeRV1be+N4cDYJKffGzDa88vQENZiRm0GRq6a+HPGQMd2k\n"
       "-----END RSA PRIVATE KEY-----")

POSITIVE: dict[str, list[str]] = {
    "email": ["jane.doe@example.com", "j+tag@mail.example.co.uk", "first_last@sub.domain.io",
              "X9@a-b.org", "o'neil@example.com".replace("'", "")],
    "phone": ["(415) 555-2671", "415-555-2671", "415.555.2671", "+1 415 555 2671", "+44 20 7946 0958",
              "+49 30 901820", "4155552671"],
    "payment_card": ["4111 1111 1111 1111", "4111-1111-1111-1111", "5500005555555559", "340000000000009",
                     "6011 0009 9013 9424", "4012888888881881"],
    "iban": ["GB82 WEST 1234 5698 7654 32", "GB82WEST12345698765432", "DE89370400440532013000",
             "FR14 2004 1010 0505 0001 3M02 606", "NL91ABNA0417164300", "CH9300762011623852957"],
    "us_ssn": ["123-45-6789", "078 05 1120", "219-09-9999"],
    "ip_address": ["192.168.10.1", "10.0.0.254", "8.8.8.8", "2001:db8::ff00:42:8329", "fe80::1",
                   "2001:0db8:85a3:0000:0000:8a2e:0370:7334"],
    "secret": ["sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx",
               "AKIAIOSFODNN7EXAMPLE", "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
               "xoxb-2401234567-1234567890123-AbCdEfGhIjKl", "AIzaSyA-1234567890abcdefghijklmnopqrstu",
               "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
               PEM],
}

NEGATIVE: dict[str, list[str]] = {
    "email": ["jane.doe@example", "@example.com", "jane..doe@example.com", "user@@example.com",
              "name at example dot com", ".jane@example.com"],
    "phone": ["555-2671", "415-555-267", "12345", "1.2.3", "2024-11-27", "ref 2401234567-99", "+1 23"],
    "payment_card": ["4111 1111 1111 1112", "4111111111111", "1234 5678 9012 3456", "0000 0000 0000 0000",
                     "411111111111111111111"],
    "iban": ["GB82 WEST 1234 5698 7654 33", "GB82WEST1234569876543", "DE89370400440532013001",
             "XX00 1234", "ABCD1234"],
    "us_ssn": ["000-45-6789", "666-45-6789", "912-45-6789", "123-00-6789", "123-45-0000", "123456789",
               "123-45-67890", "123-45 6789"],
    "ip_address": ["256.1.1.1", "1.2.3", "1.2.3.4.5", "192.168.1", "12:30:45", "v1.2.3.4.5"],
    "secret": ["sk-short", "task-list-of-things-to-do-today-and-more", "AKIA1234", "AKIAIOSFODNN7EXAMPLEXX",
               "ghp_tooShort123", "xoxb-123", "eyJhbGciOiJIUzI1NiJ9.notajwt",
               "-----BEGIN PUBLIC KEY-----", "my-sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"],
}

# Sentences each sample is placed in: before and after, as an answer would carry it.
FRAMES = ("{}", "Contact: {} thanks", "value={}.", "({})")


def scores() -> dict[str, tuple[int, int, int]]:
    """Per detector: (true positives, false positives, false negatives), one per sample and frame."""
    out: dict[str, tuple[int, int, int]] = {}
    for name, det in BUILT_IN.items():
        tp = fp = fn = 0
        for owner, samples in [*((n, s) for n, s in POSITIVE.items()), *(("", s) for s in NEGATIVE.values())]:
            for sample in samples:
                for frame in FRAMES:
                    text = frame.format(sample)
                    hits, _ = scan([(det, name)], text)
                    found = [text[h.start:h.end] for h in hits]
                    if owner == name:
                        tp, fn = (tp + 1, fn) if found == [sample] else (tp, fn + 1)
                        fp += len([f for f in found if f != sample])
                    else:
                        fp += len(found)
        out[name] = (tp, fp, fn)
    return out
