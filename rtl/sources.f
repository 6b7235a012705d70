# The NIU RTL in compile order (packages first, then leaves before the modules that instantiate
# them; Icarus reads in order).  Read by rtl/CMakeLists.txt and scripts/synth_niu.sh; the
# generated package (niu_constants.svh) comes first and is added by each of them.
niu_burst_gen.sv
niu_axi_rd.sv
niu_axi_wr.sv
niu_skid.sv
niu_xoshiro.sv
niu_gauss_index.sv
niu_gauss_rom.sv
niu_gauss.sv
niu_table.sv
niu_device.sv
niu_lane.sv
niu_noise_pipe.sv
niu_beat_split.sv
niu_beat_join.sv
niu_word_unpack.sv
niu_loader.sv
niu_axil_regs.sv
niu.sv
