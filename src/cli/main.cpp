// SPDX-License-Identifier: MIT
// eigen-attention: the command-line tool of EigenAttention (see --help, and help.cpp).
#include <EigenAttention/EigenAttention.hpp>
#include <EigenAttention/Npy.hpp>
#include <EigenAttention/Version.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "../index.hpp"
#include "commands.hpp"
#include "demo.hpp"
#include "heatmap.hpp"
#include "help.hpp"
#include "util.hpp"

namespace ea = EigenAttention;
namespace cli = EigenAttention::cli;
using EigenAttention::internal::index_t;

namespace {

constexpr int kFailure = 1;
constexpr int kUsage = 2;

// One line: newlines in a message become spaces.
std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void report(const std::string& message) {
  if (!cli::error_reporting()) return;  // a distributed run's rank other than 0
  std::fprintf(stderr, "eigen-attention: %s\n", one_line(message).c_str());
}

// "try 'eigen-attention run --help'" for the command being parsed.
std::string hint(const CLI::App& app) {
  const auto selected = app.get_subcommands();
  return std::string("try 'eigen-attention ") + (selected.empty() ? "" : selected.front()->get_name() + " ") +
         "--help'";
}

void help_text(CLI::App* app, const char* text) {
  app->formatter_fn([text](const CLI::App*, std::string, CLI::AppFormatMode) { return std::string(text); });
}

// Arguments CLI11 did not recognise (extras are allowed so that they can be named here).
void check_leftovers(const CLI::App& app, bool top) {
  const std::vector<std::string> rest = app.remaining();
  if (rest.empty()) return;
  const std::string& first = rest.front();
  if (first.size() > 1 && first[0] == '-') throw cli::usage_error(first, "unknown option");
  if (top)
    throw cli::usage_error(first, "unknown command; the commands are demo, run, heatmap, bench and decode");
  throw cli::usage_error(first, "unexpected argument (options take the form --name VALUE)");
}

// CLI11's own messages, in the tool's words where they are cryptic.
std::string parse_message(const CLI::App& app, const CLI::ParseError& e) {
  std::string message = one_line(e.what());
  const std::size_t colon = message.find(": ");
  if (!message.empty() && message[0] == '-' && colon != std::string::npos) {
    const std::string option = message.substr(0, colon), rest = message.substr(colon + 2);
    if (rest.find("required") != std::string::npos && rest.size() >= 7 &&
        rest.compare(rest.size() - 7, 7, "missing") == 0) {
      return option + ": needs a value";
    }
    if (rest.rfind("At Most", 0) == 0) return option + ": given more than once";
    return message;
  }
  const auto selected = app.get_subcommands();
  return (selected.empty() ? std::string("command line") : selected.front()->get_name()) + ": " + message;
}

}  // namespace

namespace {

int run_main(int argc, char** argv) {
  CLI::App app{"", "eigen-attention"};
  help_text(&app, cli::kToolHelp);
  app.set_version_flag("--version", cli::version_text);
  app.allow_extras();

  // demo
  CLI::App* demo = app.add_subcommand("demo");
  help_text(demo, cli::kDemoHelp);
  demo->allow_extras();
  bool quick = false;
  std::string tokens_text, dim_text, runs_text;
  demo->add_flag("--quick", quick);
  demo->add_option("--tokens", tokens_text);
  demo->add_option("--dim", dim_text);
  demo->add_option("--runs", runs_text);
  std::string demo_heatmap;
  demo->add_option("--heatmap", demo_heatmap);

  // run
  cli::RunArgs run_args;
  CLI::App* run = app.add_subcommand("run");
  help_text(run, cli::kRunHelp);
  run->allow_extras();
  run->add_option("--q", run_args.q);
  run->add_option("--k", run_args.k);
  run->add_option("--v", run_args.v);
  // The outputs: an empty name is an error, not an output left out (--out is optional).
  std::vector<CLI::Option*> run_outputs = {run->add_option("--out", run_args.out),
                                           run->add_option("--scores", run_args.scores),
                                           run->add_option("--lse", run_args.lse)};
  run->add_flag("--causal", run_args.causal);
  run->add_option("--align", run_args.align);
  run->add_option("--scale", run_args.scale);
  run->add_option("--softcap", run_args.softcap);
  run->add_option("--window", run_args.window);
  run->add_option("--chunk-size", run_args.chunk_size);
  run->add_option("--mask", run_args.mask);
  run->add_option("--key-lengths", run_args.key_lengths);
  run->add_option("--alibi", run_args.alibi);
  run->add_option("--sinks", run_args.sinks);
  run->add_option("--layout", run_args.layout);
  CLI::Option* run_compute = run->add_option("--compute", run_args.compute);
  run->add_option("--threads", run_args.threads);
  run->add_flag("--average-heads", run_args.average_heads);
  run_outputs.push_back(run->add_option("--heatmap", run_args.heatmap));
  run->add_option("--batch", run_args.batch);
  run->add_option("--head", run_args.head);
  run->add_option("--tokens", run_args.tokens);
  run->add_flag("--quiet", run_args.quiet);
  CLI::Option* run_distributed = run->add_option("--distributed", run_args.distributed);
  CLI::Option* run_sharding = run->add_option("--sharding", run_args.sharding);

  // heatmap
  cli::HeatmapArgs heatmap_args;
  CLI::App* heatmap = app.add_subcommand("heatmap");
  help_text(heatmap, cli::kHeatmapHelp);
  heatmap->allow_extras();
  heatmap->add_option("--scores", heatmap_args.scores);
  heatmap->add_option("--png", heatmap_args.png);
  heatmap->add_option("--tokens", heatmap_args.tokens);
  heatmap->add_option("--batch", heatmap_args.batch);
  heatmap->add_option("--head", heatmap_args.head);
  heatmap->add_option("--layout", heatmap_args.layout);
  heatmap->add_option("--scale", heatmap_args.scale);
  heatmap->add_flag("--quiet", heatmap_args.quiet);

  // bench
  CLI::App* bench = app.add_subcommand("bench");
  help_text(bench, cli::kBenchHelp);
  bench->allow_extras();
  cli::BenchArgs bench_args;
  bench->add_flag("--quick", bench_args.quick);

  // decode
  CLI::App* decode = app.add_subcommand("decode");
  help_text(decode, cli::kDecodeHelp);
  decode->allow_extras();
  cli::DecodeArgs decode_args;
  decode->add_option("--sequences", decode_args.sequences);
  decode->add_option("--heads", decode_args.heads);
  decode->add_option("--kv-heads", decode_args.kv_heads);
  decode->add_option("--dim", decode_args.dim);
  decode->add_option("--prompt", decode_args.prompt);
  decode->add_option("--generate", decode_args.generate);
  decode->add_option("--page-size", decode_args.page_size);
  decode->add_option("--storage", decode_args.storage);
  decode->add_option("--threads", decode_args.threads);

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::Success& e) {  // --help, --version
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      report(parse_message(app, e) + " (" + hint(app) + ")");
      return kUsage;
    }

    try {
      check_leftovers(app, true);
      if (app.get_subcommands().empty()) {
        throw cli::usage_error("command", "missing: give one of demo, run, heatmap, bench, decode");
      }
      if (*demo) {
        check_leftovers(*demo, false);
        cli::DemoSettings settings = quick ? cli::DemoSettings::quick() : cli::DemoSettings{};
        for (const auto& [option, text, field] : {std::tuple{"--tokens", &tokens_text, &settings.tokens},
                                                  std::tuple{"--dim", &dim_text, &settings.dim},
                                                  std::tuple{"--runs", &runs_text, &settings.runs}}) {
          if (text->empty()) continue;
          const long long v = cli::parse_integer(option, *text);
          if (v <= 0 || v > 1 << 20)
            throw cli::usage_error(option, "must be a positive integer, got " + *text);
          *field = static_cast<index_t>(v);
        }
        const int status = cli::run_demo(settings);
        if (!demo_heatmap.empty()) {
          // The sentence's causal SCORES, as the README shows them.
          const cli::Sentence sentence = cli::demo_sentence();
          ea::Options causal;
          causal.causal = true;
          const ea::DecomposedResult<double> r =
              ea::attention_decomposed(sentence.q, sentence.k, sentence.v, causal);
          cli::HeatmapOptions options;
          options.row_labels = options.col_labels = sentence.tokens;
          options.title = "causal SCORES";
          options.cell_pixels = 36;
          cli::write_heatmap_png(demo_heatmap, r.scores.data(), r.scores.rows(), r.scores.cols(),
                                 r.scores.cols(), options);
          std::printf("%s: heatmap of the causal SCORES (PNG)\n", demo_heatmap.c_str());
        }
        return status;
      }
      if (*run) {
        check_leftovers(*run, false);
        for (const CLI::Option* option : run_outputs) {
          if (option->count() > 0 && option->as<std::string>().empty()) {
            throw cli::usage_error(option->get_name(), "the file name is empty");
          }
        }
        run_args.compute_given = run_compute->count() > 0;
        run_args.distributed_given = run_distributed->count() > 0;
        run_args.sharding_given = run_sharding->count() > 0;
        return cli::run_command(run_args);
      }
      if (*heatmap) {
        check_leftovers(*heatmap, false);
        return cli::heatmap_command(heatmap_args);
      }
      if (*decode) {
        check_leftovers(*decode, false);
        return cli::decode_command(decode_args);
      }
      check_leftovers(*bench, false);
      return cli::bench_command(bench_args);
    } catch (const cli::Failure& e) {
      if (e.usage()) {
        report(std::string(e.what()) + " (" + hint(app) + ")");
        return kUsage;
      }
      report(e.what());
      return kFailure;
    }
  } catch (const ea::npy::Error& e) {  // names the file
    report(e.what());
  } catch (const std::invalid_argument& e) {  // the library's, naming the shapes
    std::string what = e.what();
    if (what.rfind("EigenAttention::", 0) == 0) what = what.substr(16);
    report(what);
  } catch (const std::bad_alloc&) {
    report("memory: not enough for this problem");
  } catch (const std::exception& e) {
    report(std::string("error: ") + e.what());
  }
  return kFailure;
}

}  // namespace

int main(int argc, char** argv) {
  const int status = run_main(argc, argv);
  // After a `run --distributed`, MPI ends only now, every rank together: rank 0 has reported the
  // error, if any, before any rank exits (mpiexec stops the job when one rank fails).
  cli::finish_distributed();
  return status;
}
