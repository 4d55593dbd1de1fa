// Ulysses attention: placeholder while it is written.
#include <stdexcept>

#include "distributed/collective.hpp"

namespace EigenAttention {
namespace distributed {

void ulysses_attention(MPI_Comm, HeadsView<const float>, HeadsView<const float>, HeadsView<const float>,
                       HeadsView<float>, const Options&, const Masks<float>&, HeadsView<float>,
                       const Config&) {
  throw std::logic_error("ulysses_attention: not yet");
}
void ulysses_attention(MPI_Comm, HeadsView<const double>, HeadsView<const double>, HeadsView<const double>,
                       HeadsView<double>, const Options&, const Masks<double>&, HeadsView<double>,
                       const Config&) {
  throw std::logic_error("ulysses_attention: not yet");
}
void ulysses_attention_backward(MPI_Comm, HeadsView<const float>, HeadsView<const float>,
                                HeadsView<const float>, HeadsView<const float>, HeadsView<const float>,
                                HeadsView<const float>, HeadsView<float>, HeadsView<float>, HeadsView<float>,
                                const Options&, const Masks<float>&, const Config&) {
  throw std::logic_error("ulysses_attention_backward: not yet");
}
void ulysses_attention_backward(MPI_Comm, HeadsView<const double>, HeadsView<const double>,
                                HeadsView<const double>, HeadsView<const double>, HeadsView<const double>,
                                HeadsView<const double>, HeadsView<double>, HeadsView<double>,
                                HeadsView<double>, const Options&, const Masks<double>&, const Config&) {
  throw std::logic_error("ulysses_attention_backward: not yet");
}

}  // namespace distributed
}  // namespace EigenAttention
