// SPDX-License-Identifier: MIT
// Training with the backward pass: a student attention layer learns the query, key and value
// projections of a teacher's causal attention by gradient descent (Adam), its loss falling step
// by step. Before training, one entry of each weight gradient is checked against a central finite
// difference of the loss, in double: how to check gradients of your own model.
//
//   eigen_attention_train_step_example [--steps N]     (default 300)
#include <EigenAttention/EigenAttention.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace ea = EigenAttention;

namespace {

const Eigen::Index T = 32, d_model = 16, d_head = 8;

/// A tiny linear congruential generator (Knuth's MMIX constants): the same numbers on every
/// machine and compiler, unlike std::uniform_real_distribution or Eigen's Random().
class Lcg {
 public:
  explicit Lcg(std::uint64_t seed) : state_(seed) {}
  /// Uniform in [-1, 1), from the top 53 bits of the state.
  double next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state_ >> 11) * 0x1p-52 - 1.0;
  }
  /// rows x cols entries uniform in [-scale, scale), filled row by row.
  ea::RowMatrix<double> matrix(Eigen::Index rows, Eigen::Index cols, double scale) {
    ea::RowMatrix<double> m(rows, cols);
    for (Eigen::Index i = 0; i < rows; ++i)
      for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = scale * next();
    return m;
  }

 private:
  std::uint64_t state_;
};

/// One layer's projections: Q = X Wq, K = X Wk, V = X Wv (each d_model x d_head).
template <typename Scalar>
struct Weights {
  ea::RowMatrix<Scalar> wq, wk, wv;
};

Weights<double> random_weights(Lcg& rng, double scale) {
  return {rng.matrix(d_model, d_head, scale), rng.matrix(d_model, d_head, scale),
          rng.matrix(d_model, d_head, scale)};
}

template <typename To>
Weights<To> cast(const Weights<double>& w) {
  return {w.wq.cast<To>(), w.wk.cast<To>(), w.wv.cast<To>()};
}

/// Forward and backward of L = 0.5 |attention(X Wq, X Wk, X Wv) - Y|_F^2 / T, with every
/// intermediate allocated once, here: a training loop over it allocates nothing.
template <typename Scalar>
class Layer {
 public:
  explicit Layer(const ea::Options& opt)
      : opt_(opt),
        q_(T, d_head),
        k_(T, d_head),
        v_(T, d_head),
        out_(T, d_head),
        d_out_(T, d_head),
        dq_(T, d_head),
        dk_(T, d_head),
        dv_(T, d_head),
        lse_(T) {}

  /// Runs the layer on x and returns the loss against y; keeps Q, K, V, the output, its LSE and
  /// dL/d(out) for backward().
  Scalar forward(const ea::RowMatrix<Scalar>& x, const Weights<Scalar>& w, const ea::RowMatrix<Scalar>& y) {
    q_.noalias() = x * w.wq;
    k_.noalias() = x * w.wk;
    v_.noalias() = x * w.wv;
    ea::attention_into(q_, k_, v_, out_, lse_, opt_);  // keeps the log-sum-exps for the backward
    d_out_ = (out_ - y) / Scalar(T);                   // dL/d(out)
    return Scalar(0.5) * (out_ - y).squaredNorm() / Scalar(T);
  }

  /// dL/dW of the last forward(), by the chain rule through Q = X Wq, K = X Wk, V = X Wv.
  void backward(const ea::RowMatrix<Scalar>& x, Weights<Scalar>& grad) {
    ea::attention_backward_into(q_, k_, v_, out_, lse_, d_out_, dq_, dk_, dv_, opt_);
    grad.wq.noalias() = x.transpose() * dq_;
    grad.wk.noalias() = x.transpose() * dk_;
    grad.wv.noalias() = x.transpose() * dv_;
  }

 private:
  ea::Options opt_;
  ea::RowMatrix<Scalar> q_, k_, v_, out_, d_out_, dq_, dk_, dv_;
  ea::Vector<Scalar> lse_;
};

/// Checks the largest entry of each gradient dL/dWq, dL/dWk, dL/dWv against the central
/// difference (L(w + h) - L(w - h)) / 2h. Returns the largest relative difference.
double check_gradients(const ea::RowMatrix<double>& x, const Weights<double>& start,
                       const ea::RowMatrix<double>& y, const ea::Options& opt) {
  Layer<double> layer(opt);
  Weights<double> w = start, grad = start;
  layer.forward(x, w, y);
  layer.backward(x, grad);

  // A central difference errs by about h^2 |L'''| / 6 (truncation) plus eps |L| / h (rounding of
  // L, eps = 2.2e-16): h = 1e-5, near the cube root of eps, keeps both near 1e-10 of the
  // derivative here. The backward's own error is a few eps.
  const double h = 1e-5;
  const char* names[] = {"Wq", "Wk", "Wv"};
  ea::RowMatrix<double>* weights[] = {&w.wq, &w.wk, &w.wv};
  const ea::RowMatrix<double>* grads[] = {&grad.wq, &grad.wk, &grad.wv};
  double worst = 0;
  for (int m = 0; m < 3; ++m) {
    Eigen::Index i = 0, j = 0;
    grads[m]->cwiseAbs().maxCoeff(&i, &j);
    double& entry = (*weights[m])(i, j);
    const double saved = entry;
    entry = saved + h;
    const double plus = layer.forward(x, w, y);
    entry = saved - h;
    const double minus = layer.forward(x, w, y);
    entry = saved;
    const double numeric = (plus - minus) / (2 * h);
    const double analytic = (*grads[m])(i, j);
    const double rel = std::abs(analytic - numeric) / std::max(std::abs(analytic), std::abs(numeric));
    worst = std::max(worst, rel);
    std::printf("  dL/d%s(%td, %td): backward %+.10e, finite difference %+.10e, relative difference %.1e\n",
                names[m], i, j, analytic, numeric, rel);
  }
  return worst;
}

/// One step of Adam (Kingma and Ba, 2015) on the weights w with gradient g: m1 and m2 are the
/// running means of g and of g squared, t counts the steps from 1. Allocates nothing.
void adam(ea::RowMatrix<float>& w, const ea::RowMatrix<float>& g, ea::RowMatrix<float>& m1,
          ea::RowMatrix<float>& m2, int t, float lr) {
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  m1 = beta1 * m1 + (1 - beta1) * g;
  m2 = beta2 * m2 + (1 - beta2) * g.cwiseAbs2();
  const float c1 = 1 - std::pow(beta1, float(t)), c2 = 1 - std::pow(beta2, float(t));  // bias corrections
  w.array() -= lr * (m1.array() / c1) / ((m2.array() / c2).sqrt() + eps);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 300;
  if (argc == 3 && std::strcmp(argv[1], "--steps") == 0) steps = std::atoi(argv[2]);
  if ((argc != 1 && argc != 3) || steps < 1) {
    std::fprintf(stderr, "usage: %s [--steps N]   (N >= 1, default 300)\n", argv[0]);
    return 2;
  }

  ea::Options opt;
  opt.causal = true;  // as a decoder layer: token i attends to tokens 0..i

  // The input (T tokens of d_model features), the teacher and the student's starting point,
  // each from its own seed. The teacher's logits have a standard deviation near 1.
  Lcg data_rng(1), teacher_rng(2), student_rng(3);
  const ea::RowMatrix<double> x = data_rng.matrix(T, d_model, 1.0);
  const Weights<double> teacher = random_weights(teacher_rng, 0.75);
  const Weights<double> student = random_weights(student_rng, 0.75);
  const ea::RowMatrix<double> y = ea::attention(x * teacher.wq, x * teacher.wk, x * teacher.wv, opt);

  // 1. The gradients, checked in double where the finite difference is accurate.
  std::printf("gradient check at the student's start (double, central differences, h = 1e-5):\n");
  const double worst = check_gradients(x, student, y, opt);
  // The two sides differ by about 1e-10 (see check_gradients): 1e-6 leaves a margin of 10^4,
  // while a wrong gradient (a missing term, a transposed factor, a wrong scale) is off by far more.
  if (!(worst < 1e-6)) {
    std::fprintf(stderr, "train_step: the gradient check failed (relative difference %.1e > 1e-6)\n", worst);
    return 1;
  }

  // 2. Training in float. Everything the loop touches is allocated here.
  const ea::RowMatrix<float> xf = x.cast<float>(), yf = y.cast<float>();
  Weights<float> w = cast<float>(student);  // the start the gradients were checked at
  Weights<float> grad = w, m1 = w, m2 = w;  // the gradients and Adam's two moments
  for (Weights<float>* m : {&m1, &m2}) {
    m->wq.setZero();
    m->wk.setZero();
    m->wv.setZero();
  }
  Layer<float> layer(opt);
  const float lr = 0.02f;
  const int every = std::max(1, steps / 10);

  std::printf("training (float, Adam, learning rate %g, %d steps):\n", lr, steps);
  const float initial = layer.forward(xf, w, yf);
  float loss = initial;
  std::printf("  step %4d  loss %.4e\n", 0, loss);
  for (int step = 1; step <= steps; ++step) {
    layer.backward(xf, grad);
    adam(w.wq, grad.wq, m1.wq, m2.wq, step, lr);
    adam(w.wk, grad.wk, m1.wk, m2.wk, step, lr);
    adam(w.wv, grad.wv, m1.wv, m2.wv, step, lr);
    loss = layer.forward(xf, w, yf);
    if (step % every == 0) std::printf("  step %4d  loss %.4e\n", step, loss);
  }

  // Below 1/100: fitting Wv alone, with the student's Wq and Wk frozen, stalls near 1/20 of the
  // initial loss here, so this needs the gradients through the softmax too (300 steps reach
  // about 1/500).
  const float factor = 0.01f;
  std::printf("final loss %.4e after %d steps: %.4f x the initial %.4e (must be below %g)\n", loss, steps,
              loss / initial, initial, factor);
  if (!(loss < factor * initial)) {
    std::fprintf(stderr, "train_step: the loss did not fall below %g x its initial value\n", factor);
    return 1;
  }
  return 0;
}
