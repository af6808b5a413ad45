"""Ids (switchyard.core.ids) are unique whatever else draws from or seeds ``random``."""

from __future__ import annotations

import os
import random

from switchyard.core.ids import hex_id


def test_seeding_the_shared_random_does_not_repeat_ids():
    random.seed(0)
    first = hex_id(8)
    random.seed(0)
    assert hex_id(8) != first
    assert len(first) == 16 and int(first, 16) >= 0


def test_a_forked_worker_draws_ids_of_its_own():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id after the fork
        os.write(w, hex_id(8).encode())
        os._exit(0)
    os.close(w)
    mine = hex_id(8)
    os.waitpid(pid, 0)
    with os.fdopen(r) as f:
        theirs = f.read()
    assert len(theirs) == 16 and theirs != mine
