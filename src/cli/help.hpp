// SPDX-License-Identifier: MIT
// The --help texts of eigen-attention and its commands.
#pragma once

namespace EigenAttention {
namespace cli {

extern const char* const kToolHelp;
extern const char* const kDemoHelp;
extern const char* const kRunHelp;
extern const char* const kHeatmapHelp;
extern const char* const kBenchHelp;
extern const char* const kDecodeHelp;

}  // namespace cli
}  // namespace EigenAttention
