// SPDX-License-Identifier: MIT
/// \file kv_cache_model.hpp
/// A model of PagedKVCache (KVCache.hpp) for decode_cache.cpp and the fuzz target fuzz_kv_cache:
/// each live sequence's tokens (its rows of K and V, in the storage type) and the pages it holds
/// as abstract page numbers with reference counts (fork shares them, append takes new ones and
/// first replaces a partly filled last page that another sequence shares, truncate and release
/// drop them, erase drops the pages inside its range or moves tokens down, replacing each shared
/// page it writes), so that the cache's bookkeeping (length, pages(), free_pages(): which pages two
/// sequences share, where copy-on-write happened, how many pages are in use) and the bytes in its
/// pages can be compared with the model after every operation. Also: a sequence's tokens read
/// back from the pages, and a decode on a fresh cache holding the model's tokens (the yardstick
/// a decode on the cache must equal bitwise).
///
/// Eigen and the library only, no doctest (the fuzz target includes it): the checks return a
/// description of the first difference, empty when there is none.
#pragma once

#include <EigenAttention/EigenAttention.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace ea_test {
namespace kv_model {

namespace ea = EigenAttention;
using Eigen::Index;

/// One row per token, heads side by side (what append takes).
template <typename S>
using TokenRows = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Same shape and the same bytes (bitwise: -0 differs from 0, a NaN equals only its own bits).
template <class A, class B>
bool same_bits(const Eigen::MatrixBase<A>& a, const Eigen::MatrixBase<B>& b) {
  static_assert(std::is_same_v<typename A::Scalar, typename B::Scalar>, "one scalar type");
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Index i = 0; i < a.rows(); ++i)
    for (Index j = 0; j < a.cols(); ++j) {
      const typename A::Scalar x = a(i, j), y = b(i, j);
      if (std::memcmp(&x, &y, sizeof x) != 0) return false;
    }
  return true;
}

template <typename S>
class CacheModel {
 public:
  struct Sequence {
    TokenRows<S> K, V;        ///< length x (kv_heads d_k), length x (kv_heads d_v)
    std::vector<long> pages;  ///< abstract pages, ceil(length / page_size) of them
    Index length() const { return K.rows(); }
  };

  CacheModel(Index kv_heads, Index d_k, Index d_v, Index page_size, Index capacity_tokens)
      : kv_heads_(kv_heads),
        d_k_(d_k),
        d_v_(d_v),
        page_size_(page_size),
        num_pages_((capacity_tokens + page_size - 1) / page_size) {}

  Index kv_heads() const { return kv_heads_; }
  Index d_k() const { return d_k_; }
  Index d_v() const { return d_v_; }
  Index page_size() const { return page_size_; }
  Index num_pages() const { return num_pages_; }
  /// Pages held by no sequence.
  Index free_pages() const { return num_pages_ - static_cast<Index>(refs_.size()); }
  bool live(std::int32_t id) const { return sequences_.count(id) != 0; }
  const Sequence& sequence(std::int32_t id) const { return sequences_.at(id); }
  const std::map<std::int32_t, Sequence>& sequences() const { return sequences_; }
  /// Every id the cache ever handed out (live or released).
  const std::set<std::int32_t>& ids() const { return ids_; }

  /// create() returned id (which must not be live: the caller checks can_adopt first).
  void create(std::int32_t id) {
    Sequence s;
    s.K.resize(0, kv_heads_ * d_k_);
    s.V.resize(0, kv_heads_ * d_v_);
    adopt(id, s);
  }
  /// fork(src) returned id: the same tokens, every page shared.
  void fork(std::int32_t src, std::int32_t id) {
    const Sequence copy = sequences_.at(src);
    for (const long p : copy.pages) ++refs_[p];
    adopt(id, copy);
  }
  /// May create() or fork() hand out id? Never an id handed out before: a released id stays
  /// stale (SequenceId), though its slot is reused.
  bool can_adopt(std::int32_t id) const { return id >= 0 && ids_.count(id) == 0; }

  /// Pages that appending n tokens to id takes from the pool: the new pages, and the copy of a
  /// partly filled last page that another sequence shares.
  Index pages_taken(std::int32_t id, Index n) const {
    const Sequence& s = sequences_.at(id);
    if (n == 0) return 0;
    const Index need = pages_for(s.length() + n), have = static_cast<Index>(s.pages.size());
    return need - have + (copy_on_write(s) ? 1 : 0);
  }
  /// Appends rows of k and v; false, changing nothing, when the pool has too few free pages.
  bool append(std::int32_t id, const TokenRows<S>& k, const TokenRows<S>& v) {
    Sequence& s = sequences_.at(id);
    const Index n = k.rows();
    if (pages_taken(id, n) > free_pages()) return false;
    if (n == 0) return true;
    if (copy_on_write(s)) {
      --refs_[s.pages.back()];
      s.pages.back() = next_page_;
      refs_[next_page_++] = 1;
    }
    while (static_cast<Index>(s.pages.size()) < pages_for(s.length() + n)) {
      s.pages.push_back(next_page_);
      refs_[next_page_++] = 1;
    }
    TokenRows<S> K(s.length() + n, s.K.cols()), V(s.length() + n, s.V.cols());
    K.topRows(s.length()) = s.K;
    K.bottomRows(n) = k;
    V.topRows(s.length()) = s.V;
    V.bottomRows(n) = v;
    s.K = std::move(K);
    s.V = std::move(V);
    return true;
  }
  /// Keeps the first `length` tokens; false, changing nothing, outside [0, length].
  bool truncate(std::int32_t id, std::int64_t length) {
    Sequence& s = sequences_.at(id);
    if (length < 0 || length > s.length()) return false;
    drop(s, pages_for(static_cast<Index>(length)));
    s.K.conservativeResize(static_cast<Index>(length), Eigen::NoChange);
    s.V.conservativeResize(static_cast<Index>(length), Eigen::NoChange);
    return true;
  }
  /// Removes tokens [begin, end), as PagedKVCache::erase: a whole number of pages drops the pages
  /// of the range (the page holding `end` replaced first, when shared and `begin` is inside a page:
  /// it receives that page's kept tokens); otherwise every page from begin's to the new last one is
  /// replaced when shared, and the pages past the new length dropped. false, changing nothing, for
  /// a range outside [0, length] or too few free pages for the replacements.
  bool erase(std::int32_t id, std::int64_t begin, std::int64_t end) {
    Sequence& s = sequences_.at(id);
    const Index L = s.length(), P = page_size_;
    if (begin < 0 || end < begin || end > L) return false;
    const Index b = static_cast<Index>(begin), e = static_cast<Index>(end), n = e - b;
    if (n == 0) return true;
    if (e == L) return truncate(id, begin);
    const Index first = b / P;
    if (n % P == 0) {
      const Index last = e / P;
      long& page = s.pages[static_cast<std::size_t>(last)];
      if (b % P != 0 && refs_.at(page) > 1) {
        if (free_pages() == 0) return false;
        --refs_[page];
        page = next_page_;
        refs_[next_page_++] = 1;
      }
      for (Index i = first; i < last; ++i) {
        const long q = s.pages[static_cast<std::size_t>(i)];
        if (--refs_[q] == 0) refs_.erase(q);
      }
      s.pages.erase(s.pages.begin() + first, s.pages.begin() + last);
    } else {
      const Index keep = pages_for(L - n);
      Index copies = 0;
      for (Index i = first; i < keep; ++i)
        copies += refs_.at(s.pages[static_cast<std::size_t>(i)]) > 1 ? 1 : 0;
      if (copies > free_pages()) return false;
      for (Index i = first; i < keep; ++i) {
        long& page = s.pages[static_cast<std::size_t>(i)];
        if (refs_.at(page) <= 1) continue;
        --refs_[page];
        page = next_page_;
        refs_[next_page_++] = 1;
      }
      drop(s, keep);
    }
    const auto cut = [&](TokenRows<S>& m) {
      TokenRows<S> r(L - n, m.cols());
      r.topRows(b) = m.topRows(b);
      r.bottomRows(L - e) = m.bottomRows(L - e);
      m = std::move(r);
    };
    cut(s.K);
    cut(s.V);
    return true;
  }
  void release(std::int32_t id) {
    drop(sequences_.at(id), 0);
    sequences_.erase(id);
  }

 private:
  Index pages_for(Index length) const { return (length + page_size_ - 1) / page_size_; }
  bool copy_on_write(const Sequence& s) const {
    return s.length() % page_size_ != 0 && refs_.at(s.pages.back()) > 1;
  }
  void adopt(std::int32_t id, const Sequence& s) {
    sequences_[id] = s;
    ids_.insert(id);
  }
  void drop(Sequence& s, Index keep) {
    while (static_cast<Index>(s.pages.size()) > keep) {
      if (--refs_[s.pages.back()] == 0) refs_.erase(s.pages.back());
      s.pages.pop_back();
    }
  }

  Index kv_heads_, d_k_, d_v_, page_size_, num_pages_;
  std::map<std::int32_t, Sequence> sequences_;
  std::map<long, int> refs_;  // abstract page -> sequences holding it (only pages in use)
  long next_page_ = 0;
  std::set<std::int32_t> ids_;
};

/// Element `col` (head col / d, element col % d) of slot `slot` of page `page` of the cache's
/// keys (or values, `keys` false), wherever the pool's layout puts it (its strides, from
/// abi::kv_pool_layout: NHD or HND alike).
template <typename S>
S stored_element(const ea::PagedKVCache<S>& cache, bool keys, Index page, Index slot, Index col) {
  const ea::abi::PagedKV l = ea::abi::kv_pool_layout(cache.pool());
  const Index d = keys ? l.d_k : l.d_v;
  const Index at =
      keys ? page * l.k_page_stride + slot * l.k_token_stride + (col / d) * l.k_head_stride + col % d
           : page * l.v_page_stride + slot * l.v_token_stride + (col / d) * l.v_head_stride + col % d;
  return (keys ? cache.key_pages() : cache.value_pages())[at];
}

/// Sequence id's keys and values as they lie in the cache's pages: length x (kv_heads d).
template <typename S>
std::pair<TokenRows<S>, TokenRows<S>> stored_tokens(const ea::PagedKVCache<S>& cache, ea::SequenceId id) {
  const Index n = static_cast<Index>(cache.length(id)), P = cache.page_size();
  const std::vector<std::int32_t> pages = cache.pages(id);
  TokenRows<S> K(n, cache.kv_heads() * cache.d_k()), V(n, cache.kv_heads() * cache.d_v());
  for (Index t = 0; t < n; ++t) {
    const Index page = pages[static_cast<std::size_t>(t / P)];
    for (Index c = 0; c < K.cols(); ++c) K(t, c) = stored_element(cache, true, page, t % P, c);
    for (Index c = 0; c < V.cols(); ++c) V(t, c) = stored_element(cache, false, page, t % P, c);
  }
  return {K, V};
}

/// What throws std::invalid_argument (true), returns (false) or throws anything else (rethrown).
template <class F>
bool throws_invalid_argument(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

/// The cache's bookkeeping against the model's: free_pages; each live sequence's length and
/// number of pages, every page in [0, num_pages), and pages shared exactly where the model shares
/// them (one real page per abstract page and back); the pages in use are num_pages - free_pages;
/// every id handed out and since released throws std::invalid_argument on length() and pages();
/// pages_needed(s, n) of each live sequence equals the pages the model's append of n would take.
/// Then, with `contents`, each live sequence's tokens in the pages equal the model's bitwise.
template <typename S>
std::string check_cache(const ea::PagedKVCache<S>& cache, const CacheModel<S>& model, bool contents = true) {
  const auto num = [](auto x) { return std::to_string(x); };
  if (cache.num_pages() != model.num_pages())
    return "num_pages " + num(cache.num_pages()) + ", model " + num(model.num_pages());
  if (cache.free_pages() != model.free_pages())
    return "free_pages " + num(cache.free_pages()) + ", model " + num(model.free_pages());
  std::map<long, std::int32_t> to_real;
  std::map<std::int32_t, long> to_model;
  for (const auto& [id, s] : model.sequences()) {
    const ea::SequenceId sid{id};
    const std::string which = "sequence " + num(id) + ": ";
    if (cache.length(sid) != s.length())
      return which + "length " + num(cache.length(sid)) + ", model " + num(s.length());
    const std::vector<std::int32_t> pages = cache.pages(sid);
    if (pages.size() != s.pages.size())
      return which + num(pages.size()) + " pages, model " + num(s.pages.size());
    const Index P = model.page_size();
    for (const Index n : {Index(0), Index(1), P - 1, P, P + 1, 3 * P}) {
      if (cache.pages_needed(sid, n) != model.pages_taken(id, n)) {
        return which + "pages_needed(" + num(n) + ") = " + num(cache.pages_needed(sid, n)) + ", model " +
               num(model.pages_taken(id, n));
      }
    }
    for (std::size_t n = 0; n < pages.size(); ++n) {
      const std::int32_t real = pages[n];
      const long abstract = s.pages[n];
      if (real < 0 || real >= cache.num_pages()) return which + "page " + num(real) + " outside the pool";
      const auto r = to_real.emplace(abstract, real);
      const auto m = to_model.emplace(real, abstract);
      if (r.first->second != real || m.first->second != abstract) {
        return which + "page " + num(n) + " is " + num(real) +
               (r.first->second != real ? ", which the model does not share with page " + num(r.first->second)
                                        : ", shared where the model holds two different pages");
      }
    }
  }
  if (static_cast<Index>(to_real.size()) != cache.num_pages() - cache.free_pages()) {
    return num(to_real.size()) + " pages held by sequences but num_pages - free_pages = " +
           num(cache.num_pages() - cache.free_pages());
  }
  for (const std::int32_t id : model.ids()) {
    if (model.live(id)) continue;
    if (!throws_invalid_argument([&] { (void)cache.length({id}); }) ||
        !throws_invalid_argument([&] { (void)cache.pages({id}); }))
      return "released sequence " + num(id) + ": length() or pages() does not throw";
  }
  if (contents) {
    for (const auto& [id, s] : model.sequences()) {
      const auto stored = stored_tokens(cache, ea::SequenceId{id});
      if (!same_bits(stored.first, s.K)) return "sequence " + num(id) + ": the keys in the pages differ";
      if (!same_bits(stored.second, s.V)) return "sequence " + num(id) + ": the values in the pages differ";
    }
  }
  return {};
}

/// The pages of every live sequence of the model, as the cache reports them.
template <typename S>
std::map<std::int32_t, std::vector<std::int32_t>> all_pages(const ea::PagedKVCache<S>& cache,
                                                            const CacheModel<S>& model) {
  std::map<std::int32_t, std::vector<std::int32_t>> pages;
  for (const auto& entry : model.sequences()) pages[entry.first] = cache.pages({entry.first});
  return pages;
}

/// out (T_q x H d_v) and lse (T_q x H) of a decode.
template <typename T>
struct Decoded {
  TokenRows<T> out, lse;
};

/// attention_decode_into of Q against sequence id of the cache.
template <typename S, class DQ>
Decoded<ea::ComputeScalar<S>> decode_sequence(const ea::PagedKVCache<S>& cache, ea::SequenceId id,
                                              const Eigen::MatrixBase<DQ>& Q, const ea::Options& opt,
                                              const ea::Masks<ea::ComputeScalar<S>>& masks = {}) {
  Decoded<ea::ComputeScalar<S>> r;
  const std::int64_t cu[2] = {0, static_cast<std::int64_t>(Q.rows())};
  ea::attention_decode_into(cache, &id, 1,
                            ea::HeadsView<const typename DQ::Scalar>::side_by_side(Q, cache.d_k()), cu, r.out,
                            r.lse, opt, masks);
  return r;
}

/// The same decode on a fresh cache (same page size and sizes) holding exactly `K` and `V`,
/// appended at once into pages that follow each other.
/// decode_fresh on a cache of the storage type Stored (a quantized one: K and V quantized as appended).
template <typename Stored, typename S, class DQ>
Decoded<ea::ComputeScalar<Stored>> decode_fresh_as(Index kv_heads, Index d_k, Index d_v, Index page_size,
                                                   const TokenRows<S>& K, const TokenRows<S>& V,
                                                   const Eigen::MatrixBase<DQ>& Q, const ea::Options& opt,
                                                   const ea::Masks<ea::ComputeScalar<Stored>>& masks = {}) {
  ea::PagedKVCache<Stored> fresh(kv_heads, d_k, d_v, page_size, K.rows());
  const ea::SequenceId id = fresh.create();
  fresh.append(id, K, V);
  return decode_sequence(fresh, id, Q, opt, masks);
}
template <typename S, class DQ>
Decoded<ea::ComputeScalar<S>> decode_fresh(Index kv_heads, Index d_k, Index d_v, Index page_size,
                                           const TokenRows<S>& K, const TokenRows<S>& V,
                                           const Eigen::MatrixBase<DQ>& Q, const ea::Options& opt,
                                           const ea::Masks<ea::ComputeScalar<S>>& masks = {}) {
  return decode_fresh_as<S>(kv_heads, d_k, d_v, page_size, K, V, Q, opt, masks);
}

/// decode_fresh of sequence id of the model.
template <typename S, class DQ>
Decoded<ea::ComputeScalar<S>> decode_model(const CacheModel<S>& model, std::int32_t id,
                                           const Eigen::MatrixBase<DQ>& Q, const ea::Options& opt,
                                           const ea::Masks<ea::ComputeScalar<S>>& masks = {}) {
  const auto& s = model.sequence(id);
  return decode_fresh(model.kv_heads(), model.d_k(), model.d_v(), model.page_size(), s.K, s.V, Q, opt, masks);
}
/// decode_fresh_as<Stored> of sequence id of the model (of float tokens: quantized as appended).
template <typename Stored, typename S, class DQ>
Decoded<ea::ComputeScalar<Stored>> decode_model_as(const CacheModel<S>& model, std::int32_t id,
                                                   const Eigen::MatrixBase<DQ>& Q, const ea::Options& opt,
                                                   const ea::Masks<ea::ComputeScalar<Stored>>& masks = {}) {
  const auto& s = model.sequence(id);
  return decode_fresh_as<Stored>(model.kv_heads(), model.d_k(), model.d_v(), model.page_size(), s.K, s.V, Q,
                                 opt, masks);
}

}  // namespace kv_model
}  // namespace ea_test
