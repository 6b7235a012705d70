// Bindings for PU timing, the weight scheduler, the system model and NIU timing
// (aimcemu._core.timing).
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "niu/niu_timing.hpp"
#include "perf_model/pu_config.hpp"
#include "perf_model/scheduler.hpp"
#include "perf_model/system.hpp"
#include "perf_model/timing.hpp"
#include "perf_model/uram.hpp"

namespace py = pybind11;
using namespace aimcemu;

namespace {

void bind_config(py::module_& m) {
    py::class_<PuConfig>(m, "PuConfig")
        .def(py::init<>())
        .def_readwrite("name", &PuConfig::name)
        .def_readwrite("r_sa", &PuConfig::r_sa)
        .def_readwrite("c_sa", &PuConfig::c_sa)
        .def_readwrite("r_g", &PuConfig::r_g)
        .def_readwrite("fast_hz", &PuConfig::fast_hz)
        .def_readwrite("axi_hz", &PuConfig::axi_hz)
        .def_readwrite("axi_bytes", &PuConfig::axi_bytes)
        .def_readwrite("align_bytes", &PuConfig::align_bytes)
        .def_readwrite("adm_command_overhead", &PuConfig::adm_command_overhead)
        .def_readwrite("adm_io_stream_bytes", &PuConfig::adm_io_stream_bytes)
        .def_readwrite("uram_count", &PuConfig::uram_count)
        .def_readwrite("uram_entries", &PuConfig::uram_entries)
        .def_readwrite("uram_weight_bits", &PuConfig::uram_weight_bits)
        .def_readwrite("uram_subregions", &PuConfig::uram_subregions)
        .def_readwrite("postproc_pipeline", &PuConfig::postproc_pipeline)
        .def_readwrite("hbm_latency_s", &PuConfig::hbm_latency_s)
        .def_readwrite("uram_write_bits", &PuConfig::uram_write_bits)
        .def_readwrite("uram_cascades", &PuConfig::uram_cascades)
        .def_readwrite("hbm_channel_peak_bytes_per_s", &PuConfig::hbm_channel_peak_bytes_per_s)
        .def_readwrite("hbm_efficiency", &PuConfig::hbm_efficiency)
        .def_property_readonly("peak_ops", &PuConfig::peak_ops)
        .def_property_readonly("port_bytes_per_s", &PuConfig::port_bytes_per_s)
        .def_property_readonly("uram_write_bytes_per_s", &PuConfig::uram_write_bytes_per_s)
        .def_property_readonly("hbm_channel_bytes_per_s", &PuConfig::hbm_channel_bytes_per_s)
        .def_property_readonly("weight_port_bytes_per_s", &PuConfig::weight_port_bytes_per_s)
        .def_property_readonly("uram_capacity_entries", [](const PuConfig& p) { return uram_capacity_entries(p); })
        .def_property_readonly("uram_capacity_bytes", [](const PuConfig& p) { return uram_capacity_bytes(p); })
        .def("validate", &PuConfig::validate, py::arg("source") = "<memory>")
        .def("__repr__", [](const PuConfig& p) {
            return "<PuConfig " + p.name + " " + std::to_string(p.r_sa) + "x" + std::to_string(p.c_sa) + ">";
        });
    m.def("pu2x", &pu2x);
    m.def("pu1x", &pu1x);
    m.def("pu_by_name", &pu_by_name, py::arg("name"), py::arg("source") = "<memory>");
    m.def("parse_pu_mix", &parse_pu_mix, py::arg("mix"), py::arg("source") = "<memory>");

    py::class_<HbmConfig>(m, "HbmConfig")
        .def(py::init<>())
        .def_readwrite("channels", &HbmConfig::channels)
        .def_readwrite("channel_bytes_per_s", &HbmConfig::channel_bytes_per_s);
}

void bind_layer_timing(py::module_& m) {
    py::enum_<FirstLayerIm2col>(m, "FirstLayerIm2col")
        .value("host", FirstLayerIm2col::Host)
        .value("fpga", FirstLayerIm2col::Fpga);
    py::enum_<TimingModel>(m, "TimingModel").value("full", TimingModel::Full).value("roofline", TimingModel::Roofline);
    py::enum_<AvgPoolMapping>(m, "AvgPoolMapping")
        .value("block_diagonal", AvgPoolMapping::BlockDiagonal)
        .value("dense", AvgPoolMapping::Dense);
    py::class_<TimingOptions>(m, "TimingOptions")
        .def(py::init<>())
        .def_readwrite("first_layer", &TimingOptions::first_layer)
        .def_readwrite("avg_pool", &TimingOptions::avg_pool)
        .def_readwrite("model", &TimingOptions::model)
        .def_readwrite("peripherals", &TimingOptions::peripherals)
        .def_readwrite("periph_lanes", &TimingOptions::periph_lanes)
        .def_readwrite("periph_latency", &TimingOptions::periph_latency);

    py::class_<TileTiming>(m, "TileTiming")
        .def_readonly("layer", &TileTiming::layer)
        .def_readonly("tile", &TileTiming::tile)
        .def_readonly("rows", &TileTiming::rows)
        .def_readonly("entries", &TileTiming::entries)
        .def_readonly("load_bytes", &TileTiming::load_bytes)
        .def_readonly("exec_s", &TileTiming::exec_s)
        .def_readonly("side_port_s", &TileTiming::side_port_s)
        .def_readonly("shared_static", &TileTiming::shared_static);

    py::class_<LayerTiming>(m, "LayerTiming")
        .def_readonly("layer", &LayerTiming::layer)
        .def_readonly("name", &LayerTiming::name)
        .def_readonly("kind", &LayerTiming::kind)
        .def_readonly("timed", &LayerTiming::timed)
        .def_readonly("n", &LayerTiming::n)
        .def_readonly("m", &LayerTiming::m)
        .def_readonly("m_eff", &LayerTiming::m_eff)
        .def_readonly("p", &LayerTiming::p)
        .def_readonly("tiles", &LayerTiming::tiles)
        .def_readonly("columns", &LayerTiming::columns)
        .def_readonly("wave_cycles", &LayerTiming::wave_cycles)
        .def_readonly("sa_cycles", &LayerTiming::sa_cycles)
        .def_readonly("in_cycles_per_column", &LayerTiming::in_cycles_per_column)
        .def_readonly("out_cycles_per_column", &LayerTiming::out_cycles_per_column)
        .def_readonly("residual_cycles_per_column", &LayerTiming::residual_cycles_per_column)
        .def_readonly("hbm_cycles_per_column", &LayerTiming::hbm_cycles_per_column)
        .def_readonly("adm_bound_cycles", &LayerTiming::adm_bound_cycles)
        .def_readonly("wrb_cycles", &LayerTiming::wrb_cycles)
        .def_readonly("fill_cycles", &LayerTiming::fill_cycles)
        .def_readonly("stream_cycles", &LayerTiming::stream_cycles)
        .def_readonly("cycles", &LayerTiming::cycles)
        .def_readonly("bound", &LayerTiming::bound)
        .def_readonly("wrb_condition", &LayerTiming::wrb_condition)
        .def_readonly("peripherals", &LayerTiming::peripherals)
        .def_readonly("periph_cycles", &LayerTiming::periph_cycles)
        .def_readonly("periph_stall_cycles", &LayerTiming::periph_stall_cycles)
        .def_readonly("macs", &LayerTiming::macs)
        .def_readonly("weight_bytes", &LayerTiming::weight_bytes)
        .def_readonly("input_bytes", &LayerTiming::input_bytes)
        .def_readonly("output_bytes", &LayerTiming::output_bytes)
        .def_readonly("residual_bytes", &LayerTiming::residual_bytes)
        .def_readonly("time_s", &LayerTiming::time_s)
        .def_readonly("efficiency", &LayerTiming::efficiency);

    py::class_<NetworkTiming>(m, "NetworkTiming")
        .def_readonly("pu", &NetworkTiming::pu)
        .def_readonly("options", &NetworkTiming::options)
        .def_readonly("layers", &NetworkTiming::layers)
        .def_readonly("tiles", &NetworkTiming::tiles)
        .def_readonly("compute_s", &NetworkTiming::compute_s)
        .def_readonly("macs", &NetworkTiming::macs)
        .def_readonly("weight_bytes", &NetworkTiming::weight_bytes);

    m.def("time_network", &time_network, py::arg("net"), py::arg("pu"), py::arg("options") = TimingOptions{});
    m.def("time_layer", &time_layer, py::arg("net"), py::arg("layer"), py::arg("pu"), py::arg("options") = TimingOptions{});
    m.def("sa_pipeline_cycles", &sa_pipeline_cycles, py::arg("pu"), py::arg("n"), py::arg("m"), py::arg("p"));
    m.def("sa_pipeline_exact", &sa_pipeline_exact, py::arg("pu"), py::arg("n"), py::arg("m"));
    m.def("aligned_beats", &aligned_beats, py::arg("pu"), py::arg("address"), py::arg("bytes"));
}

void bind_scheduler(py::module_& m) {
    py::enum_<SchedulePolicy>(m, "SchedulePolicy")
        .value("baseline", SchedulePolicy::Baseline)
        .value("adaptive", SchedulePolicy::Adaptive)
        .value("double_buffer", SchedulePolicy::DoubleBuffer)
        .value("in_order_prefetch", SchedulePolicy::InOrderPrefetch);
    m.def("schedule_policy_from_string", &schedule_policy_from_string, py::arg("name"), py::arg("source") = "<memory>");

    py::class_<SchedTile>(m, "SchedTile")
        .def(py::init([](double exec_s, double load_s, std::int64_t entries, double side_port_s, std::string label) {
                 return SchedTile{exec_s, load_s, entries, side_port_s, std::move(label)};
             }),
             py::arg("exec_s"), py::arg("load_s"), py::arg("entries"), py::arg("side_port_s") = 0.0, py::arg("label") = "")
        .def_readwrite("exec_s", &SchedTile::exec_s)
        .def_readwrite("load_s", &SchedTile::load_s)
        .def_readwrite("entries", &SchedTile::entries)
        .def_readwrite("side_port_s", &SchedTile::side_port_s)
        .def_readwrite("label", &SchedTile::label);
    py::class_<ScheduleProblem>(m, "ScheduleProblem")
        .def(py::init<>())
        .def_readwrite("tiles", &ScheduleProblem::tiles)
        .def_readwrite("capacity", &ScheduleProblem::capacity)
        .def_readwrite("port_headroom", &ScheduleProblem::port_headroom)
        .def_readwrite("load_latency_s", &ScheduleProblem::load_latency_s)
        .def_readwrite("source", &ScheduleProblem::source);
    py::class_<TileSchedule>(m, "TileSchedule")
        .def_readonly("lead", &TileSchedule::lead)
        .def_readonly("load_start", &TileSchedule::load_start)
        .def_readonly("load_end", &TileSchedule::load_end)
        .def_readonly("exec_start", &TileSchedule::exec_start)
        .def_readonly("exec_end", &TileSchedule::exec_end)
        .def_readonly("stall", &TileSchedule::stall)
        .def_readonly("time_ratio", &TileSchedule::time_ratio)
        .def_readonly("memory_ratio", &TileSchedule::memory_ratio)
        .def_readonly("occupancy", &TileSchedule::occupancy);
    py::class_<TileInterval>(m, "TileInterval")
        .def_readonly("tile", &TileInterval::tile)
        .def_readonly("round", &TileInterval::round)
        .def_readonly("load_start", &TileInterval::load_start)
        .def_readonly("exec_end", &TileInterval::exec_end);
    py::class_<ScheduleResult>(m, "ScheduleResult")
        .def_readonly("policy", &ScheduleResult::policy)
        .def_readonly("tiles", &ScheduleResult::tiles)
        .def_readonly("timeline", &ScheduleResult::timeline)
        .def_readonly("period_s", &ScheduleResult::period_s)
        .def_readonly("last_round_s", &ScheduleResult::last_round_s)
        .def_readonly("exec_s", &ScheduleResult::exec_s)
        .def_readonly("stall_s", &ScheduleResult::stall_s)
        .def_readonly("peak_occupancy", &ScheduleResult::peak_occupancy)
        .def_readonly("relocations_tried", &ScheduleResult::relocations_tried)
        .def_readonly("relocations_kept", &ScheduleResult::relocations_kept)
        .def_readonly("feasible", &ScheduleResult::feasible);
    m.def("schedule", &schedule, py::arg("problem"), py::arg("policy"), py::arg("max_lead") = 128, py::arg("passes") = 1);
    m.def("simulate_schedule", &simulate_schedule, py::arg("problem"), py::arg("leads"),
          py::arg("policy_label") = SchedulePolicy::Baseline);
    m.def("optimal_schedule", &optimal_schedule, py::arg("problem"));
    m.def("stall_lower_bound", &stall_lower_bound, py::arg("problem"));
}

void bind_system(py::module_& m) {
    py::enum_<MultiPuMode>(m, "MultiPuMode")
        .value("frame_parallel", MultiPuMode::FrameParallel)
        .value("layer_pipelined", MultiPuMode::LayerPipelined);
    py::enum_<NiuSharing>(m, "NiuSharing").value("shared", NiuSharing::Shared).value("per_pu", NiuSharing::PerPu);
    m.def("multi_pu_mode_from_string", &multi_pu_mode_from_string, py::arg("name"), py::arg("source") = "<memory>");
    m.def("niu_sharing_from_string", &niu_sharing_from_string, py::arg("name"), py::arg("source") = "<memory>");

    py::class_<NiuThroughput>(m, "NiuThroughput")
        .def(py::init<>())
        .def_readwrite("weights_per_s", &NiuThroughput::weights_per_s)
        .def_readwrite("program_seconds", &NiuThroughput::program_seconds)
        .def_readwrite("layer_seconds", &NiuThroughput::layer_seconds)
        .def_readwrite("channel_bytes_per_weight", &NiuThroughput::channel_bytes_per_weight)
        .def_readwrite("bound", &NiuThroughput::bound);
    py::class_<NiuConfig>(m, "NiuConfig")
        .def(py::init<>())
        .def_readwrite("lanes_per_cycle", &NiuConfig::lanes_per_cycle)
        .def_readwrite("clock_hz", &NiuConfig::clock_hz)
        .def_readwrite("beat_bytes", &NiuConfig::beat_bytes)
        .def_readwrite("channel_bytes_per_s", &NiuConfig::channel_bytes_per_s)
        .def_readwrite("channel_efficiency", &NiuConfig::channel_efficiency)
        .def_readwrite("read_latency_cycles", &NiuConfig::read_latency_cycles)
        .def_readwrite("write_latency_cycles", &NiuConfig::write_latency_cycles)
        .def("validate", &NiuConfig::validate, py::arg("source") = "<memory>");
    py::class_<NiuRoundTime>(m, "NiuRoundTime")
        .def_readonly("weights", &NiuRoundTime::weights)
        .def_readonly("seconds", &NiuRoundTime::seconds)
        .def_readonly("cycles", &NiuRoundTime::cycles)
        .def_readonly("program_seconds", &NiuRoundTime::program_seconds)
        .def_readonly("bytes_read", &NiuRoundTime::bytes_read)
        .def_readonly("bytes_written", &NiuRoundTime::bytes_written)
        .def_readonly("weights_per_s", &NiuRoundTime::weights_per_s)
        .def_readonly("bound", &NiuRoundTime::bound);
    m.def("niu_throughput", &niu_throughput, py::arg("config"));
    m.def("niu_round_time", &niu_round_time, py::arg("config"), py::arg("weights"), py::arg("layers") = 0);
    m.def("niu_program_time", &niu_program_time, py::arg("config"), py::arg("layer_weights"));

    py::class_<SystemConfig>(m, "SystemConfig")
        .def(py::init<>())
        .def_readwrite("pus", &SystemConfig::pus)
        .def_readwrite("hbm", &SystemConfig::hbm)
        .def_readwrite("timing", &SystemConfig::timing)
        .def_readwrite("policy", &SystemConfig::policy)
        .def_readwrite("mode", &SystemConfig::mode)
        .def_readwrite("niu_count", &SystemConfig::niu_count)
        .def_readwrite("niu_sharing", &SystemConfig::niu_sharing)
        .def_readwrite("niu", &SystemConfig::niu);
    m.def("u50_system", &u50_system);

    py::class_<PuRun>(m, "PuRun")
        .def_readonly("timing", &PuRun::timing)
        .def_readonly("layers", &PuRun::layers)
        .def_readonly("problem", &PuRun::problem)
        .def_readonly("schedule", &PuRun::schedule)
        .def_readonly("baseline", &PuRun::baseline)
        .def_readonly("lower_bound_stall_s", &PuRun::lower_bound_stall_s)
        .def_readonly("static_entries", &PuRun::static_entries)
        .def_readonly("compute_s", &PuRun::compute_s)
        .def_readonly("latency_s", &PuRun::latency_s)
        .def_readonly("weight_bytes_per_round", &PuRun::weight_bytes_per_round)
        .def_readonly("aimc_weight_bytes", &PuRun::aimc_weight_bytes)
        .def_readonly("macs", &PuRun::macs);
    m.def("run_pu", &run_pu, py::arg("net"), py::arg("pu"), py::arg("timing") = TimingOptions{},
          py::arg("policy") = SchedulePolicy::Adaptive, py::arg("layers") = std::vector<int>{},
          py::arg("aimc") = std::vector<bool>{}, py::arg("pin_static") = false);

    py::class_<PuReport>(m, "PuReport")
        .def_readonly("slot", &PuReport::slot)
        .def_readonly("pu", &PuReport::pu)
        .def_readonly("layers", &PuReport::layers)
        .def_readonly("compute_s", &PuReport::compute_s)
        .def_readonly("stall_s", &PuReport::stall_s)
        .def_readonly("baseline_stall_s", &PuReport::baseline_stall_s)
        .def_readonly("lower_bound_stall_s", &PuReport::lower_bound_stall_s)
        .def_readonly("latency_s", &PuReport::latency_s)
        .def_readonly("fps", &PuReport::fps)
        .def_readonly("niu", &PuReport::niu)
        .def_readonly("weight_channel_use", &PuReport::weight_channel_use)
        .def_readonly("activation_channel_use", &PuReport::activation_channel_use)
        .def_readonly("residual_channel_use", &PuReport::residual_channel_use);
    py::class_<NiuReport>(m, "NiuReport")
        .def_readonly("slot", &NiuReport::slot)
        .def_readonly("pus", &NiuReport::pus)
        .def_readonly("weights_per_s_needed", &NiuReport::weights_per_s_needed)
        .def_readonly("utilization", &NiuReport::utilization)
        .def_readonly("channel_use", &NiuReport::channel_use);
    py::class_<SystemReport>(m, "SystemReport")
        .def_readonly("mode", &SystemReport::mode)
        .def_readonly("fps", &SystemReport::fps)
        .def_readonly("latency_s", &SystemReport::latency_s)
        .def_readonly("peak_ops", &SystemReport::peak_ops)
        .def_readonly("efficiency", &SystemReport::efficiency)
        .def_readonly("macs_per_frame", &SystemReport::macs_per_frame)
        .def_readonly("bottleneck", &SystemReport::bottleneck)
        .def_readonly("aimc_weights", &SystemReport::aimc_weights)
        .def_readonly("aimc_layers", &SystemReport::aimc_layers)
        .def_readonly("max_channel_use", &SystemReport::max_channel_use)
        .def_readonly("channels_used", &SystemReport::channels_used)
        .def_readonly("pus", &SystemReport::pus)
        .def_readonly("nius", &SystemReport::nius);
    m.def("evaluate_system", &evaluate_system, py::arg("net"), py::arg("config"), py::arg("aimc") = std::vector<bool>{});
}

void bind_timing(py::module_& root) {
    auto m = root.def_submodule("timing", "PU timing, weight-transfer scheduler, system throughput, NIU timing");
    bind_config(m);
    bind_layer_timing(m);
    bind_scheduler(m);
    bind_system(m);
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(40, bind_timing);
