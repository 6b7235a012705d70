# The analog tile peripherals' RTL in compile order: the NIU's generator design (instantiated, not
# copied), then the block.  Read by rtl/CMakeLists.txt and scripts/synth_periph.sh; the generated
# package (niu_constants.svh) comes first and is added by each of them.
niu_xoshiro.sv
niu_gauss_index.sv
niu_gauss_rom.sv
niu_gauss.sv
pu_periph_lane.sv
pu_periph.sv
