// symbolic.h: symbolic integer expressions for tensor dimensions ("seq+past", "2*batch",
// "floor((h+1)/2)"): a canonical sum of monomials with integer coefficients over named symbols,
// where an atom is either a symbol or the floor-division of an expression by a positive constant.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace onnxtool {

/// An integer-valued expression over named symbols. Values are canonical: two expressions that
/// are equal by the rules of commutative rings (plus the floor-division normalisation below)
/// compare equal and print the same. Arithmetic does not check int64 overflow (dimension sizes
/// stay far from it).
class SymExpr {
 public:
  /// The constant 0.
  SymExpr() = default;
  /// A constant.
  SymExpr(int64_t c);  // NOLINT(google-explicit-constructor): constants mix freely with symbols
  /// The symbol `name` (any non-empty string; printed as is).
  static SymExpr symbol(std::string name);

  bool isConstant() const;
  /// The value when constant, else nullopt.
  std::optional<int64_t> asConstant() const;
  /// The constant term (0 when there is none).
  int64_t constantTerm() const;
  /// Whether the value is >= 0 for every non-negative value of the symbols (symbols are
  /// dimension sizes): true when no coefficient is negative (floor atoms have non-negative
  /// numerators by construction).
  bool provablyNonNegative() const;

  friend SymExpr operator+(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator-(const SymExpr& a, const SymExpr& b);
  friend SymExpr operator*(const SymExpr& a, const SymExpr& b);
  SymExpr operator-() const;
  /// floor(a / c). Precondition: c > 0. Terms whose coefficients are multiples of c are taken
  /// out of the floor, so the floor atom's numerator has coefficients in [0, c).
  static SymExpr floorDiv(const SymExpr& a, int64_t c);
  /// ceil(a / c) == floor((a + c - 1) / c). Precondition: c > 0.
  static SymExpr ceilDiv(const SymExpr& a, int64_t c);
  /// a / b when the division is exact by construction: b a non-zero constant dividing every
  /// coefficient, or b a single monomial that divides every term of a. nullopt otherwise.
  static std::optional<SymExpr> exactDiv(const SymExpr& a, const SymExpr& b);

  bool operator==(const SymExpr& o) const;
  bool operator!=(const SymExpr& o) const { return !(*this == o); }
  /// The canonical printed form: terms ordered by their atoms, the constant last
  /// ("batch*seq+past-1", "2*n", "floor((h+1)/2)", "-3").
  std::string str() const;

 private:
  struct Atom {
    std::string key;                      ///< symbol name, or the printed floor atom
    std::shared_ptr<const SymExpr> num;   ///< floor atoms: the numerator
    int64_t den = 0;                      ///< floor atoms: the divisor (> 1); 0 for symbols
  };
  struct Term {
    std::vector<Atom> atoms;  ///< sorted by key; repeated atoms are powers; empty: constant
    int64_t coeff = 0;
  };
  static bool atomsLess(const std::vector<Atom>& a, const std::vector<Atom>& b);
  static bool atomsEqual(const std::vector<Atom>& a, const std::vector<Atom>& b);
  static std::string termKey(const std::vector<Atom>& atoms);
  void addTerm(const std::vector<Atom>& atoms, int64_t coeff);

  std::vector<Term> terms_;  ///< sorted by atoms, constant first, no zero coefficients
};

}  // namespace onnxtool
