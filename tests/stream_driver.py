"""Drive a component's cmd/wdata/rdata streams under the Amaranth simulator
(the channel and the ALU channel share the interface) and record what the
golden models need: arrival and pop cycles, read beats, the issue trace,
the final status."""

from amaranth.sim import Simulator

from golden.isa import ErrorCode, Opcode


def drive_streams(dut, words, wdata, idle=(), stall=(), clear_at=None, max_cycles=4000,
                  tail=60, ports=None):
    """Offer ``words`` and ``wdata`` except in ``idle`` cycles, hold read
    ready low in ``stall`` cycles, pulse ``err_clear`` at ``clear_at``, hold
    the extra input ``ports`` ({name: value}) from the start; stop ``tail``
    cycles after the last trace entry once every command is in."""
    out = {"cmd_arr": [], "wdata_arr": [], "pops": [], "rdata": [], "trace": [], "status": None}
    idle, stall = set(idle), set(stall)

    async def bench(ctx):
        ci = wi = 0
        for name, value in (ports or {}).items():
            ctx.set(getattr(dut, name), value)
        for cycle in range(max_cycles):
            ctx.set(dut.cmd.valid, ci < len(words) and cycle not in idle)
            ctx.set(dut.cmd.payload.as_value(), words[ci] if ci < len(words) else 0)
            ctx.set(dut.wdata.valid, wi < len(wdata) and cycle not in idle)
            ctx.set(dut.wdata.payload, wdata[wi] if wi < len(wdata) else 0)
            ctx.set(dut.rdata.ready, cycle not in stall)
            ctx.set(dut.err_clear, cycle == clear_at)
            now = ctx.get(dut.cycle)
            assert now == cycle
            if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
                out["cmd_arr"].append(now)
                ci += 1
            if ctx.get(dut.wdata.valid) and ctx.get(dut.wdata.ready):
                out["wdata_arr"].append(now)
                wi += 1
            if ctx.get(dut.rdata.valid) and ctx.get(dut.rdata.ready):
                out["pops"].append(now)
                out["rdata"].append(ctx.get(dut.rdata.payload))
            if ctx.get(dut.trace.valid):
                p = ctx.get(dut.trace.payload)
                out["trace"].append((p.cmd_id, Opcode(p.opcode), p.cycle))
            await ctx.tick()
            if ci == len(words) and cycle > tail + (out["trace"][-1][2] if out["trace"] else 0):
                break
        st = ctx.get(dut.status)
        out["status"] = (ErrorCode(st.err_code), st.err_id, st.err_count)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out
