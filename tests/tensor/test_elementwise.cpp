// Elementwise ops against plain loops in double: every dtype, broadcasting,
// non-contiguous and empty inputs, scalars on either side, in-place forms and
// the C++ operators.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <volt/tensor/ops.h>
#include "tests/tensor/reference.h"

using namespace volt;
using namespace volt::testing;

namespace {

// The same values in several layouts: contiguous, strided, transposed, expanded.
struct Layout {
  std::string name;
  Tensor t;
};

std::vector<Layout> layouts(const Shape& shape, DType dt, uint32_t seed, bool positive = false) {
  std::vector<Layout> r;
  Tensor c = sample(shape, dt, seed, positive);
  r.push_back({"contiguous", c});
  r.push_back({"strided", strided(c)});
  if (shape.size() == 2) r.push_back({"transposed", transposed_layout(c)});
  if (shape.size() == 2 && shape[0] > 0) {
    // Rows repeated by a stride-0 dim.
    Tensor row = sample({1, shape[1]}, dt, seed, positive);
    r.push_back({"expanded", row.expand(shape)});
  }
  return r;
}

const std::vector<Shape>& unary_shapes() {
  static const std::vector<Shape> s{{2, 3}, {5}, {}, {0, 3}};
  return s;
}

std::string describe(const std::string& op, DType dt, const Shape& s, const std::string& layout) {
  return op + " " + dtype_name(dt) + shape_str(s) + " " + layout;
}

// PyTorch's promotion between two tensor dtypes of the same rank, written out.
DType expected_promotion(DType a, DType b) {
  auto rank = [](DType t) {
    switch (t) {
      case DType::b8: return 0;
      case DType::u8: return 1;
      case DType::i32: return 2;
      case DType::i64: return 3;
      case DType::f32: return 4;
      case DType::f64: return 5;
    }
    return -1;
  };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace

// ---------------------------------------------------------------- unary

TEST_CASE("unary float ops match std:: on every dtype and layout") {
  struct Case {
    const char* name;
    Tensor (*fn)(const Tensor&);
    double (*ref)(double);
    bool positive;
  };
  const Case cases[] = {
      {"exp", volt::exp, [](double x) { return std::exp(x); }, false},
      {"log", volt::log, [](double x) { return std::log(x); }, true},
      {"sqrt", volt::sqrt, [](double x) { return std::sqrt(x); }, true},
      {"rsqrt", volt::rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, true},
      {"tanh", volt::tanh, [](double x) { return std::tanh(x); }, false},
      {"sigmoid", volt::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, false},
      {"reciprocal", volt::reciprocal, [](double x) { return 1.0 / x; }, false},
  };
  for (const Case& c : cases)
    for (DType dt : all_dtypes())
      for (const Shape& s : unary_shapes())
        for (const Layout& l : layouts(s, dt, 3, c.positive)) {
          Tensor out = c.fn(l.t);
          DType want = dt == DType::f64 ? DType::f64 : DType::f32;  // integers give f32
          CHECK(out.dtype() == want);
          check_close(describe(c.name, dt, s, l.name), out,
                      ref_cast(ref_map(ref_of(l.t), c.ref), want), 1e-6, 2e-6);
        }
}

TEST_CASE("neg and abs keep the dtype; logical_not gives b8") {
  for (DType dt : all_dtypes())
    for (const Shape& s : unary_shapes())
      for (const Layout& l : layouts(s, dt, 5)) {
        Ref in = ref_of(l.t);
        if (dt != DType::b8) {
          Tensor n = neg(l.t), a = abs(l.t);
          CHECK(n.dtype() == dt);
          CHECK(a.dtype() == dt);
          check_close(describe("neg", dt, s, l.name), n, ref_cast(ref_map(in, [](double x) { return -x; }), dt));
          check_close(describe("abs", dt, s, l.name), a, ref_cast(ref_map(in, [](double x) { return std::fabs(x); }), dt));
        }
        Tensor ln = logical_not(l.t);
        CHECK(ln.dtype() == DType::b8);
        check_close(describe("logical_not", dt, s, l.name), ln,
                    ref_map(in, [](double x) { return x == 0 ? 1.0 : 0.0; }));
      }
}

TEST_CASE("unary ops of special values") {
  Tensor x = Tensor::from_vector<float>({0.0f, -0.0f, INFINITY, -INFINITY, NAN, -1.0f});
  auto l = log(x).to_vector<float>();
  CHECK(std::isinf(l[0]));
  CHECK(l[0] < 0);
  CHECK(std::isinf(l[2]));
  CHECK(std::isnan(l[4]));
  CHECK(std::isnan(l[5]));
  auto r = reciprocal(x).to_vector<float>();
  CHECK(r[0] == INFINITY);
  CHECK(r[1] == -INFINITY);
  CHECK(r[2] == 0.0f);
  auto s = sigmoid(x).to_vector<float>();
  CHECK(s[2] == 1.0f);
  CHECK(s[3] == 0.0f);
  CHECK(std::isnan(s[4]));
  auto t = tanh(Tensor::from_vector<double>({100.0, -100.0})).to_vector<double>();
  CHECK(t[0] == 1.0);
  CHECK(t[1] == -1.0);
}

// ---------------------------------------------------------------- binary

namespace {

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Value&, const Value&);
  double (*ref)(double, double);
};

const BinaryCase kBinary[] = {
    {"add", volt::add, [](double a, double b) { return a + b; }},
    {"sub", volt::sub, [](double a, double b) { return a - b; }},
    {"mul", volt::mul, [](double a, double b) { return a * b; }},
    {"div", volt::div, [](double a, double b) { return a / b; }},
    {"pow", volt::pow, [](double a, double b) { return std::pow(a, b); }},
    {"maximum", volt::maximum, [](double a, double b) { return std::max(a, b); }},
    {"minimum", volt::minimum, [](double a, double b) { return std::min(a, b); }},
};

// The result dtype of a binary op on two dimensioned tensors.
DType binary_result(const std::string& op, DType a, DType b) {
  DType r = expected_promotion(a, b);
  if (op == "div" && !is_floating(r)) r = DType::f32;
  return r;
}

bool defined_for(const std::string& op, DType r) {
  // PyTorch rejects subtraction of bools; pow of bools is left out here too.
  return !(r == DType::b8 && (op == "sub" || op == "pow"));
}

// Operands with values the op is defined on for the dtype: pow gets small
// non-negative integer exponents and positive float bases.
std::pair<Tensor, Tensor> binary_operands(const std::string& op, const Shape& sa, const Shape& sb,
                                          DType da, DType db) {
  if (op == "pow") {
    Tensor a = sample(sa, da, 11, is_floating(da));
    std::vector<double> e = sample_values(shape_numel(sb), DType::u8, 12);
    for (double& x : e) x = is_floating(db) ? (x - 5) / 2.5 : std::fmod(x, 3.0);
    return {a, make(e, sb, db)};
  }
  return {sample(sa, da, 11), sample(sb, db, 12)};
}

}  // namespace

TEST_CASE("binary ops broadcast and promote on every dtype pair") {
  const std::vector<std::pair<DType, DType>> pairs = {
      {DType::f32, DType::f32}, {DType::f64, DType::f64}, {DType::i32, DType::i32},
      {DType::i64, DType::i64}, {DType::u8, DType::u8},   {DType::b8, DType::b8},
      {DType::i32, DType::f32}, {DType::u8, DType::i64},  {DType::f32, DType::f64},
      {DType::b8, DType::i32},  {DType::i64, DType::f64}, {DType::u8, DType::i32},
      {DType::f64, DType::u8}};
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 1, 4}, {3, 1}}, {{3, 4}, {3, 4}}, {{4}, {2, 3, 1}}, {{0, 3}, {3}}, {{2, 3}, {1, 1}}};
  for (const BinaryCase& c : kBinary)
    for (auto [da, db] : pairs)
      for (auto [sa, sb] : shapes) {
        DType want = binary_result(c.name, da, db);
        if (!defined_for(c.name, want)) continue;
        auto [a, b] = binary_operands(c.name, sa, sb, da, db);
        Ref ra = ref_of(a), rb = ref_of(b);
        // Both orders, and each operand non-contiguous.
        for (int variant = 0; variant < 3; ++variant) {
          Tensor x = variant == 1 ? strided(a) : a;
          Tensor y = variant == 2 ? strided(b) : b;
          Tensor out = c.fn(x, y);
          std::string label = std::string(c.name) + " " + dtype_name(da) + shape_str(sa) + " with " +
                              dtype_name(db) + shape_str(sb) + " variant " + std::to_string(variant);
          INFO(label);
          CHECK(out.dtype() == want);
          check_close(label, out, ref_cast(ref_zip(ra, rb, c.ref), want), 1e-6, 2e-6);
        }
      }
}

TEST_CASE("binary ops with bools: add is or, mul is and, sub errors") {
  Tensor a = Tensor::from_vector<bool>({true, true, false, false});
  Tensor b = Tensor::from_vector<bool>({true, false, true, false});
  CHECK(add(a, b).dtype() == DType::b8);
  CHECK(add(a, b).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK(mul(a, b).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK(maximum(a, b).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK_THROWS_AS(sub(a, b), volt::Error);
}

TEST_CASE("binary ops with scalars on either side") {
  for (DType dt : all_dtypes()) {
    Tensor a = sample({2, 3}, dt, 21, true);
    Ref ra = ref_of(a);
    struct S {
      Scalar s;
      DType want;
    };
    // PyTorch: a scalar only raises the dtype when it is of a higher kind.
    DType int_result = dt == DType::b8 ? DType::i64 : dt;
    DType float_result = is_floating(dt) ? dt : DType::f32;
    for (S sc : {S{Scalar(int64_t{3}), int_result}, S{Scalar(2.5), float_result}, S{Scalar(true), dt}}) {
      Ref rs{{}, {sc.s.value}};
      std::string label = std::string(dtype_name(dt)) + " with scalar " + sc.s.repr();
      INFO(label);
      for (const BinaryCase& c : kBinary) {
        std::string op = c.name;
        DType want = op == "div" && !is_floating(sc.want) ? DType::f32 : sc.want;
        if (!defined_for(op, want) || (op == "pow" && !is_floating(want))) continue;
        Tensor l = c.fn(a, Value(sc.s)), r = c.fn(Value(sc.s), a);
        CHECK(l.dtype() == want);
        CHECK(r.dtype() == want);
        check_close(label + " " + op + " (tensor, scalar)", l, ref_cast(ref_zip(ra, rs, c.ref), want), 1e-6, 2e-6);
        check_close(label + " " + op + " (scalar, tensor)", r, ref_cast(ref_zip(rs, ra, c.ref), want), 1e-6, 2e-6);
      }
    }
  }
}

TEST_CASE("integer literals passed to the free functions keep their kind") {
  Tensor a = Tensor::from_vector<int32_t>({1, 2, 3});
  CHECK(mul(a, 2).dtype() == DType::i32);
  CHECK(add(a, int64_t{1}).dtype() == DType::i32);
  CHECK(mul(a, 2.0).dtype() == DType::f32);
  CHECK(add(Tensor::from_vector<bool>({true}), 1).dtype() == DType::i64);
  CHECK(mul(a, 2).to_vector<int32_t>() == std::vector<int32_t>{2, 4, 6});
}

TEST_CASE("maximum and minimum propagate NaN") {
  Tensor a = Tensor::from_vector<float>({NAN, 1.0f, 2.0f});
  Tensor b = Tensor::from_vector<float>({0.0f, NAN, 1.0f});
  auto mx = maximum(a, b).to_vector<float>(), mn = minimum(a, b).to_vector<float>();
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2.0f);
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 1.0f);
}

TEST_CASE("integer division is true division") {
  Tensor a = Tensor::from_vector<int32_t>({7, -7, 1, 0});
  Tensor b = Tensor::from_vector<int32_t>({2, 2, 0, 0});
  Tensor q = div(a, b);
  CHECK(q.dtype() == DType::f32);
  auto v = q.to_vector<float>();
  CHECK(v[0] == 3.5f);
  CHECK(v[1] == -3.5f);
  CHECK(v[2] == INFINITY);
  CHECK(std::isnan(v[3]));
}

// ---------------------------------------------------------------- comparisons, logical

TEST_CASE("comparisons give b8 on every dtype pair, with ties and broadcasting") {
  struct Cmp {
    const char* name;
    Tensor (*fn)(const Value&, const Value&);
    bool (*ref)(double, double);
  };
  const Cmp cmps[] = {
      {"eq", volt::eq, [](double a, double b) { return a == b; }},
      {"ne", volt::ne, [](double a, double b) { return a != b; }},
      {"lt", volt::lt, [](double a, double b) { return a < b; }},
      {"le", volt::le, [](double a, double b) { return a <= b; }},
      {"gt", volt::gt, [](double a, double b) { return a > b; }},
      {"ge", volt::ge, [](double a, double b) { return a >= b; }},
  };
  // Integer-valued samples (so that ties occur) in each dtype.
  auto tie_sample = [](const Shape& s, DType dt, uint32_t seed) {
    DType src = dt == DType::u8 || dt == DType::b8 ? dt : DType::i32;
    return make(sample_values(shape_numel(s), src, seed), s, dt);
  };
  const std::vector<std::pair<DType, DType>> pairs = {
      {DType::f32, DType::f32}, {DType::f64, DType::f64}, {DType::i32, DType::i32}, {DType::i64, DType::i64},
      {DType::u8, DType::u8},   {DType::b8, DType::b8},   {DType::i32, DType::f32}, {DType::u8, DType::i64},
      {DType::b8, DType::f64}};
  for (const Cmp& c : cmps)
    for (auto [da, db] : pairs) {
      Tensor a = tie_sample({2, 1, 4}, da, 31), b = tie_sample({3, 1}, db, 32);
      for (int variant = 0; variant < 2; ++variant) {
        Tensor x = variant ? strided(a) : a;
        Tensor out = c.fn(x, b);
        std::string label = std::string(c.name) + " " + dtype_name(da) + " " + dtype_name(db);
        CHECK(out.dtype() == DType::b8);
        check_close(label, out, ref_zip(ref_of(a), ref_of(b), [&](double p, double q) { return c.ref(p, q) ? 1.0 : 0.0; }));
      }
      // Against a scalar on each side: 2 < 2.5 must compare in floating point.
      Tensor ls = c.fn(a, 2.5), rs = c.fn(Value(Scalar(int64_t{2})), a);
      check_close(std::string(c.name) + " scalar right", ls,
                  ref_map(ref_of(a), [&](double p) { return c.ref(p, 2.5) ? 1.0 : 0.0; }));
      check_close(std::string(c.name) + " scalar left", rs,
                  ref_map(ref_of(a), [&](double p) { return c.ref(2, p) ? 1.0 : 0.0; }));
    }
}

TEST_CASE("logical_and and logical_or on every dtype") {
  for (DType dt : all_dtypes()) {
    DType src = dt == DType::u8 || dt == DType::b8 ? dt : DType::i32;
    Tensor a = make(sample_values(8, src, 41), {2, 4}, dt);
    Tensor b = make(sample_values(4, src, 42), {4}, dt);
    Ref ra = ref_of(a), rb = ref_of(b);
    Tensor land = logical_and(strided(a), b), lor = logical_or(a, b);
    CHECK(land.dtype() == DType::b8);
    CHECK(lor.dtype() == DType::b8);
    check_close(std::string("logical_and ") + dtype_name(dt), land,
                ref_zip(ra, rb, [](double p, double q) { return (p != 0 && q != 0) ? 1.0 : 0.0; }));
    check_close(std::string("logical_or ") + dtype_name(dt), lor,
                ref_zip(ra, rb, [](double p, double q) { return (p != 0 || q != 0) ? 1.0 : 0.0; }));
  }
}

// ---------------------------------------------------------------- where

TEST_CASE("where broadcasts all three operands and promotes the two values") {
  Tensor cond = Tensor::from_vector<bool>({true, false, true, false, false, true}, {2, 3, 1});
  for (auto [da, db] : std::vector<std::pair<DType, DType>>{
           {DType::f32, DType::f32}, {DType::i32, DType::f32}, {DType::i64, DType::u8}, {DType::f64, DType::f32},
           {DType::b8, DType::b8}}) {
    Tensor a = sample({1, 4}, da, 51), b = sample({3, 4}, db, 52);
    DType want = expected_promotion(da, db);
    for (int variant = 0; variant < 3; ++variant) {
      Tensor c = variant == 1 ? strided(cond) : cond;
      Tensor y = variant == 2 ? strided(b) : b;
      Tensor out = where(c, a, y);
      std::string label = std::string("where ") + dtype_name(da) + " " + dtype_name(db);
      CHECK(out.dtype() == want);
      check_close(label, out,
                  ref_cast(ref_zip3(ref_of(cond), ref_of(a), ref_of(b),
                                    [](double c, double p, double q) { return c != 0 ? p : q; }),
                           want));
    }
  }
  // Scalars as values: an int tensor with a float scalar gives f32.
  Tensor ai = Tensor::from_vector<int32_t>({1, 2, 3});
  Tensor c3 = Tensor::from_vector<bool>({true, false, true});
  Tensor w = where(c3, ai, 0.5);
  CHECK(w.dtype() == DType::f32);
  CHECK(w.to_vector<float>() == std::vector<float>{1.0f, 0.5f, 3.0f});
  Tensor wf = where(c3, Tensor::from_vector<double>({1, 2, 3}), 7);
  CHECK(wf.dtype() == DType::f64);
  CHECK(wf.to_vector<double>() == std::vector<double>{1, 7, 3});
  // Empty.
  CHECK(where(Tensor::zeros({0, 2}, DType::b8), Tensor::ones({2}), 0.0).sizes() == Shape{0, 2});
}

// ---------------------------------------------------------------- in place

TEST_CASE("in-place ops write into the tensor and through views") {
  SUBCASE("add_ with a broadcast tensor, an alpha and a scalar") {
    Tensor a = sample({2, 3}, DType::f32, 61);
    Ref ra = ref_of(a);
    Tensor b = sample({3}, DType::f32, 62);
    Tensor same = a;
    a.add_(b, 2.0);
    CHECK(same.is_same(a));
    check_close("add_ alpha", a, ref_cast(ref_zip(ra, ref_of(b), [](double p, double q) { return p + 2 * q; }), DType::f32));
    a.add_(1.5);
    check_close("add_ scalar", a,
                ref_cast(ref_zip(ra, ref_of(b), [](double p, double q) { return double(float(p + 2 * q)) + 1.5; }), DType::f32));
    a.sub_(b);
    CHECK(a.dtype() == DType::f32);
  }
  SUBCASE("mul_ through a transposed view") {
    Tensor a = sample({3, 4}, DType::f64, 63);
    Ref ra = ref_of(a);
    Tensor t = a.t();                     // (4, 3) view of a
    t.mul_(Tensor::from_vector<double>({1, 2, 3}));  // scales columns of t = rows of a
    check_close("mul_ via view", a,
                Ref{{3, 4}, [&] {
                      std::vector<double> v = ra.v;
                      for (int i = 0; i < 3; ++i)
                        for (int j = 0; j < 4; ++j) v[i * 4 + j] *= (i + 1);
                      return v;
                    }()});
    a.mul_(0.5);
    CHECK(a.to_vector<double>()[5] == doctest::Approx(ra.v[5] * 2 * 0.5));
  }
  SUBCASE("integer in-place ops stay integer") {
    Tensor a = Tensor::from_vector<int64_t>({1, 2, 3});
    a.add_(Tensor::from_vector<int64_t>({10, 20, 30}));
    a.mul_(2);
    CHECK(a.dtype() == DType::i64);
    CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{22, 44, 66});
  }
  SUBCASE("copy_ converts the dtype and broadcasts") {
    Tensor a = Tensor::zeros({2, 3}, DType::f32);
    a.copy_(Tensor::from_vector<double>({1.25, 2.5, 3.75}));
    CHECK(a.to_vector<float>() == std::vector<float>{1.25f, 2.5f, 3.75f, 1.25f, 2.5f, 3.75f});
    Tensor i = Tensor::zeros({3}, DType::i32);
    i.copy_(Tensor::from_vector<float>({1.9f, -2.9f, 3.0f}));
    CHECK(i.to_vector<int32_t>() == std::vector<int32_t>{1, -2, 3});
    // Into a non-contiguous column.
    Tensor m = Tensor::zeros({3, 2}, DType::f32);
    m.select(1, 1).copy_(Tensor::from_vector<float>({7, 8, 9}));
    CHECK(m.to_vector<float>() == std::vector<float>{0, 7, 0, 8, 0, 9});
  }
  SUBCASE("copy_ between overlapping views of one tensor") {
    Tensor a = Tensor::arange(6, DType::f32);
    a.narrow(0, 1, 5).copy_(a.narrow(0, 0, 5));
    CHECK(a.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4});
  }
  SUBCASE("fill_ and zero_ on a whole tensor and on a narrowed view") {
    Tensor a = Tensor::ones({3, 4}, DType::i32);
    a.narrow(1, 1, 2).fill_(5);
    CHECK(a.to_vector<int32_t>() == std::vector<int32_t>{1, 5, 5, 1, 1, 5, 5, 1, 1, 5, 5, 1});
    a.select(0, 2).zero_();
    CHECK(a.to_vector<int32_t>() == std::vector<int32_t>{1, 5, 5, 1, 1, 5, 5, 1, 0, 0, 0, 0});
    Tensor b = Tensor::empty({2, 2}, DType::b8);
    b.fill_(true);
    CHECK(b.to_vector<bool>() == std::vector<bool>{true, true, true, true});
    Tensor f = Tensor::empty({2}, DType::f64);
    f.fill_(0.1).zero_();
    CHECK(f.to_vector<double>() == std::vector<double>{0, 0});
    Tensor e = Tensor::empty({0}, DType::f32);
    e.fill_(3.0);
    CHECK(e.numel() == 0);
  }
}

// ---------------------------------------------------------------- operators

TEST_CASE("C++ operators are the ops") {
  Tensor a = Tensor::from_vector<float>({-1.5f, 0.0f, 2.0f});
  Tensor b = Tensor::from_vector<float>({1.0f, 2.0f, 4.0f});
  CHECK((a + b).to_vector<float>() == std::vector<float>{-0.5f, 2.0f, 6.0f});
  CHECK((a - b).to_vector<float>() == std::vector<float>{-2.5f, -2.0f, -2.0f});
  CHECK((a * b).to_vector<float>() == std::vector<float>{-1.5f, 0.0f, 8.0f});
  CHECK((a / b).to_vector<float>() == std::vector<float>{-1.5f, 0.0f, 0.5f});
  CHECK((a * 2.0f).to_vector<float>() == std::vector<float>{-3.0f, 0.0f, 4.0f});
  CHECK((2.0 * a).to_vector<float>() == std::vector<float>{-3.0f, 0.0f, 4.0f});
  CHECK((1 - a).to_vector<float>() == std::vector<float>{2.5f, 1.0f, -1.0f});
  CHECK((b / 2).to_vector<float>() == std::vector<float>{0.5f, 1.0f, 2.0f});
  CHECK((-a).to_vector<float>() == std::vector<float>{1.5f, -0.0f, -2.0f});
  Tensor lt0 = a < 0;
  CHECK(lt0.dtype() == DType::b8);
  CHECK(lt0.to_vector<bool>() == std::vector<bool>{true, false, false});
  CHECK((a >= 0).to_vector<bool>() == std::vector<bool>{false, true, true});
  CHECK((a == b).to_vector<bool>() == std::vector<bool>{false, false, false});
  CHECK((a != 0.0).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK((a <= -1.5).to_vector<bool>() == std::vector<bool>{true, false, false});
  CHECK((a > b).to_vector<bool>() == std::vector<bool>{false, false, false});
  CHECK((!lt0).to_vector<bool>() == std::vector<bool>{false, true, true});
  CHECK(((a < 0) || (a > 1)).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(((a < 3) && (a > -1)).to_vector<bool>() == std::vector<bool>{false, true, true});
  Tensor i = Tensor::from_vector<int32_t>({1, 2, 3});
  CHECK((i * 2).dtype() == DType::i32);
  CHECK((i * 2.5).dtype() == DType::f32);
  CHECK((i + i).dtype() == DType::i32);
}
