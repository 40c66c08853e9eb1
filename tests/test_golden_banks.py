"""golden.banks.BankTimer by hand: the row rules (a MAC opens its row in
every bank as a set, a RD / WR in its bank alone; dual-path partitions) and
the timing rules (tRCD, tRAS, tRP, tCCD, tFAW) on small cases. The RTL
twin, hw.banks.BankTiming, is checked against it in tests/test_hw_banks.py."""

import dataclasses

from golden.banks import BankTimer
from golden.config import Timing
from golden.isa import Opcode
from golden.streams import Command

T = Timing(t_rcd=5, t_rp=4, t_ras=9, t_ccd=2, t_wr_inp=2, t_mac=3, t_rd_out=2)


def test_mac_opens_its_row_in_every_bank_as_a_set():
    b = BankTimer(4, T)
    mac = Command(Opcode.MAC, row=3)
    assert b.next_action(Opcode.MAC, mac) == (Opcode.ACT, [0, 1, 2, 3])
    b.apply(Opcode.ACT, [0, 1, 2, 3], 0, 3)
    assert b.next_action(Opcode.MAC, mac) is None
    assert b.earliest(Opcode.MAC, b.touched(Opcode.MAC, mac)) == T.t_rcd
    # bank 2 on another row: every open bank is precharged, then all open again
    b.apply(Opcode.PRE, [2], 20, 0)
    b.apply(Opcode.ACT, [2], 30, 7)
    assert b.next_action(Opcode.MAC, mac) == (Opcode.PRE, [0, 1, 2, 3])


def test_rd_opens_its_bank_alone():
    b = BankTimer(4, T)
    b.apply(Opcode.ACT, [0, 1, 2, 3], 0, 3)
    assert b.next_action(Opcode.RD, Command(Opcode.RD, bank=1, row=3)) is None
    assert b.next_action(Opcode.RD, Command(Opcode.RD, bank=1, row=5)) == (Opcode.PRE, [1])
    b.apply(Opcode.PRE, [1], 10, 0)
    assert b.next_action(Opcode.RD, Command(Opcode.RD, bank=1, row=5)) == (Opcode.ACT, [1])


def test_tras_trp_trcd_tccd():
    b = BankTimer(2, T)
    b.apply(Opcode.ACT, [0], 10, 1)
    assert b.earliest(Opcode.PRE, [0]) == 10 + T.t_ras
    assert b.earliest(Opcode.RD, [0]) == 10 + T.t_rcd
    b.apply(Opcode.RD, [0], 15, 1)
    assert b.earliest(Opcode.RD, [0]) == 15 + T.t_ccd  # tCCD after the last column command
    b.apply(Opcode.PRE, [0], 19, 1)
    assert b.earliest(Opcode.ACT, [0]) == 19 + T.t_rp
    assert b.earliest(Opcode.ACT, [1]) == 0  # never opened: no wait


def test_tfaw_waits_for_the_fourth_act_back():
    t = dataclasses.replace(T, t_faw=20)
    b = BankTimer(8, t)
    for i in range(4):
        assert b.earliest(Opcode.ACT, [i]) <= i
        b.apply(Opcode.ACT, [i], i, 0)
    assert b.earliest(Opcode.ACT, [4]) == 0 + 20  # the first ACT's window
    b.apply(Opcode.ACT, [4], 20, 0)
    assert b.earliest(Opcode.ACT, [5]) == 1 + 20
    # tFAW off: no window
    off = BankTimer(8, T)
    for i in range(4):
        off.apply(Opcode.ACT, [i], i, 0)
    assert off.earliest(Opcode.ACT, [4]) == 0


def test_dual_path_partitions_keep_two_rows_open():
    b = BankTimer(2, T, slice_rows=4)
    assert b.unit(1, 2) == 1 and b.unit(1, 6) == 3
    b.apply(Opcode.ACT, [1], 0, 2)  # the lower partition of bank 1
    rd = Command(Opcode.RD, bank=1, row=6)
    assert b.next_action(Opcode.RD, rd) == (Opcode.ACT, [3])  # no PRE of row 2
    b.apply(Opcode.ACT, [3], 1, 6)
    assert b.next_action(Opcode.RD, rd) is None
    assert b.next_action(Opcode.RD, Command(Opcode.RD, bank=1, row=2)) is None
