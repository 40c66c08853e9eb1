# pimorch: make sim | test | test-full | regress | verilog | lint | waves | bench | formal | synth | clean
# Every target bootstraps .venv and checks the system tools it needs.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SIM    ?= verilator
WAVES  ?= 0
export SIM WAVES

COMMANDS ?= 10000000
.PHONY: sim test test-full regress verilog lint waves bench formal synth clean tools

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "missing Python 3.11: apt-get install -y python3 python3-venv"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python >= 3.11 needed, found $$($(PYTHON) --version)"; exit 1; }
	@$(PYTHON) -m venv $(VENV) >/dev/null 2>&1 || { rm -rf $(VENV); echo "cannot create a virtual environment: apt-get install -y python3-venv"; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	@touch $@

tools:
	@command -v iverilog >/dev/null 2>&1 && command -v vvp >/dev/null 2>&1 || { echo "missing Icarus Verilog: apt-get install -y iverilog"; exit 1; }
	@command -v g++ >/dev/null 2>&1 || { echo "missing C++ compiler: apt-get install -y g++ make"; exit 1; }
	@command -v perl >/dev/null 2>&1 || { echo "missing perl (Verilator needs it): apt-get install -y perl"; exit 1; }

sim: $(STAMP) tools
	$(BIN)/pimorch sim --sim $(SIM) $(if $(filter 1 yes true,$(WAVES)),--waves,)

test: $(STAMP) tools
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

test-full: $(STAMP) tools
	PIMORCH_FULL=1 $(BIN)/python -m pytest -q -n 2 --dist loadgroup

regress: $(STAMP) tools
	$(BIN)/pimorch regress --commands $(COMMANDS) --json build/regress.json

verilog: $(STAMP) tools
	$(BIN)/pimorch verilog --out build/verilog-out

lint: $(STAMP) tools
	$(BIN)/pimorch lint

waves: $(STAMP) tools
	$(BIN)/pimorch sim --sim $(SIM) --waves
	@echo "each test's run folder holds waves.vcd, a view per block (<block>.gtkw) and golden_trace.txt; open a view with the 'view:' command printed under its test (docs/waveforms.md)"

bench: $(STAMP) tools
	$(BIN)/pimorch bench --json build/bench.json

formal: $(STAMP)
	$(BIN)/python -m sim.formal

synth: $(STAMP)
	$(BIN)/python -m sim.synth

clean:
	rm -rf build .pytest_cache .ruff_cache .hypothesis
