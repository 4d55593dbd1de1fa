// SPDX-License-Identifier: MIT
// The masks of a call (Masks: mask and bias, key lengths, ALiBi slopes) or the offsets of a
// packed batch. Internal to the library (src/check/).
#pragma once

#include "check/array.hpp"
#include "check/call.hpp"

namespace EigenAttention {
namespace internal {

/// The masks (mask and bias of [B or 1, H or 1, T_q, T_k], key lengths in [0, T_k], ALiBi
/// slopes) or a packed batch's offsets, checked and added to `inputs` (for the memory checks):
/// inputs too, checked before any output.
template <typename T>
void check_masks(const Call<T>& c, InputList& inputs);

}  // namespace internal
}  // namespace EigenAttention
