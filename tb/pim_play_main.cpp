// The clock of the standalone player (pim_play in tb/pim_tb.v.in) under
// Verilator: no VPI, no Python; the model runs until pim_play calls $finish.
#include <memory>

#include "Vpim_play.h"
#include "verilated.h"

int main(int argc, char** argv) {
    const std::unique_ptr<VerilatedContext> context{new VerilatedContext};
    context->commandArgs(argc, argv);
    const std::unique_ptr<Vpim_play> top{new Vpim_play{context.get()}};
    top->clk = 0;
    top->eval();
    while (!context->gotFinish()) {
        context->timeInc(5);
        top->clk = !top->clk;
        top->eval();
    }
    top->final();
    return 0;
}
