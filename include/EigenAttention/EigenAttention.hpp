// SPDX-License-Identifier: MIT
/// \file EigenAttention.hpp
/// The umbrella header: include this one.
///
/// EigenAttention computes scaled dot-product attention, softmax(Q K^T / sqrt(d_k)) V, on
/// Eigen matrices: exactly (no approximation), with optional causal masking, in a fused form
/// that never forms the T_q x T_k weights and a decomposed form that returns them.
/// See Attention.hpp for the calls and their semantics, Backward.hpp for the gradients
/// (training), MultiHead.hpp for batched multi-head attention (forward and backward), and Npy.hpp for NumPy
/// .npy files. One library, one CMake target (EigenAttention::EigenAttention), one pkg-config name
/// (eigen-attention).
#pragma once

#include <EigenAttention/Attention.hpp>
#include <EigenAttention/Backward.hpp>
#include <EigenAttention/BlockMask.hpp>
#include <EigenAttention/Compiled.hpp>
#include <EigenAttention/Dual.hpp>
#include <EigenAttention/HeadsView.hpp>
#include <EigenAttention/KVCache.hpp>
#include <EigenAttention/Kernels.hpp>
#include <EigenAttention/Masks.hpp>
#include <EigenAttention/Math.hpp>
#include <EigenAttention/MultiHead.hpp>
#include <EigenAttention/Npy.hpp>
#include <EigenAttention/Options.hpp>
#include <EigenAttention/Programmable.hpp>
#include <EigenAttention/Scalars.hpp>
#include <EigenAttention/Types.hpp>
#include <EigenAttention/Version.hpp>
