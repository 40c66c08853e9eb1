"""Formal harness for the channel controller (``make formal``).

The harness wraps ``hw.Channel`` on a small configuration and checks it
against ghost state kept from the streams alone (the command handshake and
the issue trace), not from the controller's tables:

* ``issue_once``: every issued command was accepted and not issued before,
  and issues with the opcode it was accepted with.
* ``dependency``: a command touching a GBuf or OBuf entry issues only after
  every earlier command (program order) touching that entry has issued, and
  after the last one's access has completed (``golden.dcs``: WR-INP
  ``t_wr_inp``, a MAC's GBuf read 1 cycle, its OBuf update ``t_mac``, or
  ``tCCD`` before another MAC, RD-OUT ``t_rd_out``).
* ``liveness`` (with fair streams: write beats always offered, read beats
  always taken): an accepted command issues within ``LIVE_BOUND`` cycles,
  and a DCS queue head within ``HEAD_BOUND`` cycles.
* ``device`` (``device=True``, on ``DEVICE_CONFIG``): no PRE, ACT or
  column access in the trace issues before every constraint of the timing
  table (``golden.timing``) that applies to it has elapsed, counted from
  the trace alone. The properties are generated from the table, one per
  constraint; on a device with modes, WR-INP and RD-OUT issue only in
  register-access mode and every other command only in normal mode (the
  mode followed from the trace's MODE entries).

Inputs are free except that commands are well formed (malformed commands
are covered by the simulation tests) and that no more than ``SLOTS``
commands are in flight (the environment holds the next one back).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, ResetSignal, Signal
from amaranth.hdl import Assert, Assume, Elaboratable
from amaranth.lib import data

from golden.config import ChannelConfig, Timing
from golden.isa import DEVICE_ACTIONS, Opcode
from golden.timing import REGISTER_KINDS, constraints
from hw.channel import Channel
from hw.streams import ID_BITS, CommandLayout

FORMAL_CONFIG = ChannelConfig(
    banks=1, rows=1, cols=1, gbuf_entries=2, obuf_entries=2, cmd_depth=2, wdata_depth=2,
    rdata_depth=2, io_depth=2, compute_depth=2, policy="dcs",
    timing=Timing(t_rcd=1, t_rp=1, t_ras=1, t_ccd=1, t_wr_inp=2, t_mac=3, t_rd_out=2))
#: The configuration of the ``device`` properties: two rows, so that row
#: misses precharge and activate, and every bank-level and channel-level
#: rule of the table longer than a cycle (one bank: no bank groups, tRRD
#: or tFAW to tell apart from tRC), the register accesses' spacing, and
#: mode switching.
DEVICE_CONFIG = FORMAL_CONFIG.replace(rows=2, t_rcd=3, t_rp=2, t_ras=3, t_ccd=2, t_rc=6,
                                      t_rtp=2, t_wr=3, t_wtr=2, t_ccd_reg=2, t_wtr_reg=3,
                                      t_rtw_reg=3, t_modch=2)
#: The ``refresh`` task's configuration: the device rules short enough that
#: the first refresh falls due (t_refi) and issues within the BMC depth.
REFRESH_CONFIG = FORMAL_CONFIG.replace(rows=2, t_rfc=2, t_refi=8)
SLOTS = 8  # ghost slots, indexed by command ID: more than can be in flight
LIVE_BOUND = 7
HEAD_BOUND = 6
_OPS = (Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD, Opcode.WR)


class FormalChannel(Elaboratable):
    """The channel with free (well-formed) inputs and the properties."""

    def __init__(self, config: ChannelConfig = FORMAL_CONFIG, live: bool = False,
                 stricter: int = 0, device: bool = False):
        #: ``stricter`` > 0 demands that many cycles more than the rules after
        #: a GBuf access (with ``device``: than every timing constraint): a
        #: false property, which must fail (the harness can fail).
        self.config, self.live, self.stricter = config, live, stricter
        self.device = device
        self.cmd_valid = Signal()
        self.cmd_payload = Signal(CommandLayout)
        self.wdata_valid = Signal()
        self.rdata_ready = Signal()

    def elaborate(self, platform):
        cfg, tm = self.config, self.config.timing
        m = Module()
        dut = Channel(cfg, datapath=False)
        dut._MustUse__silence = True  # elaborated below, directly
        m.submodules.dut = dut.elaborate(platform)  # now, so the probes exist
        cmd = self.cmd_payload
        m.d.comb += [
            dut.cmd.valid.eq(self.cmd_valid), dut.cmd.payload.eq(cmd),
            dut.wdata.valid.eq(self.wdata_valid), dut.wdata.payload.eq(0),
            dut.rdata.ready.eq(self.rdata_ready), dut.err_clear.eq(0),
        ]

        # ---- assumptions: well-formed commands (and fair streams) -------
        is_ = {o: cmd.opcode == o for o in _OPS}
        uses_bank = is_[Opcode.MAC] | is_[Opcode.RD] | is_[Opcode.WR]
        m.d.comb += Assume(sum(is_.values()) == 1)
        m.d.comb += Assume(~uses_bank | ((cmd.row < cfg.rows) & (cmd.col < cfg.cols)))
        m.d.comb += Assume(cmd.bank < cfg.banks)
        m.d.comb += Assume(cmd.gbuf_idx < cfg.gbuf_entries)
        m.d.comb += Assume(cmd.out_idx < cfg.obuf_entries)
        m.d.comb += Assume(~ResetSignal())  # runs from the initial (reset) state
        if self.live:
            m.d.comb += [Assume(self.wdata_valid), Assume(self.rdata_ready)]

        # ---- ghost state from the streams --------------------------------
        accept = self.cmd_valid & dut.cmd.ready
        acc_id = Signal(ID_BITS)
        with m.If(accept):
            m.d.sync += acc_id.eq(acc_id + 1)
        slot_bits = (SLOTS - 1).bit_length()
        rank_bits = 4
        Slot = data.StructLayout({"pending": 1, "op": 5, "g": 4, "o": 4, "rank_g": rank_bits,
                                  "rank_o": rank_bits, "age": 8})
        slots = [Signal(Slot, name=f"ghost{k}") for k in range(SLOTS)]
        G, O = cfg.gbuf_entries, cfg.obuf_entries
        acc_g = [Signal(rank_bits, name=f"acc_g{e}") for e in range(G)]
        iss_g = [Signal(rank_bits, name=f"iss_g{e}") for e in range(G)]
        acc_o = [Signal(rank_bits, name=f"acc_o{e}") for e in range(O)]
        iss_o = [Signal(rank_bits, name=f"iss_o{e}") for e in range(O)]
        since_g = [Signal(8, init=255, name=f"since_g{e}") for e in range(G)]
        since_o = [Signal(8, init=255, name=f"since_o{e}") for e in range(O)]
        lat_g = [Signal(8, name=f"lat_g{e}") for e in range(G)]
        lat_o = [Signal(8, name=f"lat_o{e}") for e in range(O)]
        mac_o = [Signal(name=f"mac_o{e}") for e in range(O)]
        for cnt in [*since_g, *since_o]:
            with m.If(cnt != 255):
                m.d.sync += cnt.eq(cnt + 1)
        for s in slots:
            with m.If(s.pending & (s.age != 255)):
                m.d.sync += s.age.eq(s.age + 1)

        touches_g = is_[Opcode.WR_INP] | is_[Opcode.MAC]
        touches_o = is_[Opcode.MAC] | is_[Opcode.RD_OUT]
        for k, s in enumerate(slots):
            with m.If(accept & (acc_id[:slot_bits] == k)):
                # The environment holds a command back while its ghost slot is
                # busy (a command SLOTS IDs older still waits, e.g. for its beat).
                m.d.comb += Assume(~s.pending)
                m.d.sync += [s.pending.eq(1), s.op.eq(cmd.opcode), s.g.eq(cmd.gbuf_idx),
                             s.o.eq(cmd.out_idx), s.age.eq(0)]
                for e in range(G):
                    with m.If(touches_g & (cmd.gbuf_idx == e)):
                        m.d.sync += s.rank_g.eq(acc_g[e])
                for e in range(O):
                    with m.If(touches_o & (cmd.out_idx == e)):
                        m.d.sync += s.rank_o.eq(acc_o[e])
        for e in range(G):
            with m.If(accept & touches_g & (cmd.gbuf_idx == e)):
                m.d.sync += acc_g[e].eq(acc_g[e] + 1)
        for e in range(O):
            with m.If(accept & touches_o & (cmd.out_idx == e)):
                m.d.sync += acc_o[e].eq(acc_o[e] + 1)

        # ---- at every issue: once, in order per entry, after completion ----
        tr = dut.trace
        issue = tr.valid & ~Cat(tr.payload.opcode == op for op in DEVICE_ACTIONS).any()
        for k, s in enumerate(slots):
            with m.If(issue & (tr.payload.cmd_id[:slot_bits] == k)):
                m.d.comb += [Assert(s.pending, "issue of a command not pending"),
                             Assert(s.op == tr.payload.opcode, "issued with another opcode")]
                m.d.sync += s.pending.eq(0)
                s_mac = s.op == Opcode.MAC
                with m.If((s.op == Opcode.WR_INP) | s_mac):
                    for e in range(G):
                        with m.If(s.g == e):
                            # a WR-INP after a WR-INP needs only the order (the
                            # writes complete in order, as MACs accumulate)
                            need_g = Mux(s_mac, lat_g[e], 1)
                            m.d.comb += [Assert(iss_g[e] == s.rank_g, "GBuf order"),
                                         Assert(since_g[e] >= need_g + self.stricter,
                                                "GBuf dependency")]
                            m.d.sync += [iss_g[e].eq(iss_g[e] + 1), since_g[e].eq(1),
                                         lat_g[e].eq(Mux(s_mac, 1, tm.t_wr_inp))]
                with m.If((s.op == Opcode.RD_OUT) | s_mac):
                    for e in range(O):
                        with m.If(s.o == e):
                            need = Mux(mac_o[e] & s_mac, tm.t_ccd, lat_o[e])
                            m.d.comb += [Assert(iss_o[e] == s.rank_o, "OBuf order"),
                                         Assert(since_o[e] >= need, "OBuf dependency")]
                            m.d.sync += [iss_o[e].eq(iss_o[e] + 1), since_o[e].eq(1),
                                         lat_o[e].eq(Mux(s_mac, tm.t_mac, tm.t_rd_out)),
                                         mac_o[e].eq(s_mac)]

        if self.device:
            self._device_rules(m, tr)

        # ---- bounded liveness ------------------------------------------
        if self.live:
            for s in slots:
                m.d.comb += Assert(~s.pending | (s.age < LIVE_BOUND), "command starved")
            probes = getattr(dut, "probes", None)
            if probes:
                for q in ("compute", "io"):
                    age = Signal(8, name=f"{q}_head_age")
                    with m.If((probes[f"{q}_count"] == 0) | probes[f"pop_{q}"]):
                        m.d.sync += age.eq(0)
                    with m.Elif(age != 255):
                        m.d.sync += age.eq(age + 1)
                    m.d.comb += Assert(age < HEAD_BOUND, f"{q} queue head starved")
        return m

    def _device_rules(self, m, tr):
        """Per constraint of the timing table: cycles since its preceding
        kinds last issued (the ``window`` most recent), from the trace; at
        an issue of a following kind, at least the latency."""
        op = tr.payload.opcode
        kinds = {"PRE": op == Opcode.PRE, "ACT": op == Opcode.ACT,
                 "RD": (op == Opcode.MAC) | (op == Opcode.RD), "WR": op == Opcode.WR,
                 "GB": op == Opcode.WR_INP, "REG": op == Opcode.RD_OUT, "MODE": op == Opcode.MODE,
                 "REF": op == Opcode.REF}
        assert self.config.banks == 1  # every bank command is at the one bank (and channel)
        for c in constraints(self.config.timing):
            since = [Signal(8, init=255, name=f"{c.key}_since{k}") for k in range(c.window)]
            for cnt in since:
                with m.If(cnt != 255):
                    m.d.sync += cnt.eq(cnt + 1)
            following = tr.valid & Cat(kinds[k] for k in c.following).any()
            m.d.comb += Assert(~following | (since[-1] >= c.latency + self.stricter), c.key)
            with m.If(tr.valid & Cat(kinds[k] for k in c.preceding).any()):
                m.d.sync += [since[0].eq(1), *(since[k].eq(since[k - 1] + (since[k - 1] != 255))
                                                for k in range(1, c.window))]
        if self.config.timing.t_refi:
            # Refresh: a REF only with every row closed, and the first one by
            # its due cycle plus the bound (golden.config.refresh_bound).
            from golden.config import refresh_bound

            is_open, cycle, refreshed = Signal(), Signal(8), Signal()
            with m.If(cycle != 255):
                m.d.sync += cycle.eq(cycle + 1)
            with m.If(tr.valid & kinds["ACT"]):
                m.d.sync += is_open.eq(1)
            with m.If(tr.valid & kinds["PRE"]):
                m.d.sync += is_open.eq(0)
            with m.If(tr.valid & kinds["REF"]):
                m.d.sync += refreshed.eq(1)
            t = self.config.timing
            m.d.comb += [Assert(~(tr.valid & kinds["REF"]) | ~is_open, "refresh with a row open"),
                         Assert(refreshed | (tr.valid & kinds["REF"])
                                | (cycle < t.t_refi + refresh_bound(t)), "refresh late")]
        if self.config.timing.t_modch:
            # The device's mode, from the trace: a MODE flips it; register
            # kinds issue only in register-access mode, the rest only in
            # normal mode.
            register = Signal()
            with m.If(tr.valid & kinds["MODE"]):
                m.d.sync += register.eq(~register)
            reg_kind = Cat(kinds[k] for k in REGISTER_KINDS).any()
            m.d.comb += Assert(~tr.valid | kinds["MODE"] | (reg_kind == register), "mode")
