// symbolic.cpp: canonical symbolic integer expressions (see symbolic.h).
#include "lib/symbolic.h"

#include <algorithm>

namespace onnxtool {

bool SymExpr::atomsLess(const std::vector<Atom>& a, const std::vector<Atom>& b) {
  if (a.size() != b.size()) return a.size() < b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].key != b[i].key) return a[i].key < b[i].key;
  return false;
}

bool SymExpr::atomsEqual(const std::vector<Atom>& a, const std::vector<Atom>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].key != b[i].key) return false;
  return true;
}

std::string SymExpr::termKey(const std::vector<Atom>& atoms) {
  std::string s;
  for (const Atom& a : atoms) {
    if (!s.empty()) s += '*';
    s += a.key;
  }
  return s;
}

void SymExpr::addTerm(const std::vector<Atom>& atoms, int64_t coeff) {
  if (coeff == 0) return;
  auto it = std::lower_bound(terms_.begin(), terms_.end(), atoms,
                             [](const Term& t, const std::vector<Atom>& k) { return atomsLess(t.atoms, k); });
  if (it != terms_.end() && atomsEqual(it->atoms, atoms)) {
    it->coeff += coeff;
    if (it->coeff == 0) terms_.erase(it);
    return;
  }
  terms_.insert(it, Term{atoms, coeff});
}

SymExpr::SymExpr(int64_t c) { addTerm({}, c); }

SymExpr SymExpr::symbol(std::string name) {
  SymExpr e;
  e.terms_.push_back(Term{{Atom{std::move(name), nullptr, 0}}, 1});
  return e;
}

bool SymExpr::isConstant() const { return terms_.empty() || (terms_.size() == 1 && terms_[0].atoms.empty()); }

std::optional<int64_t> SymExpr::asConstant() const {
  if (!isConstant()) return std::nullopt;
  return constantTerm();
}

int64_t SymExpr::constantTerm() const {
  return !terms_.empty() && terms_[0].atoms.empty() ? terms_[0].coeff : 0;
}

bool SymExpr::provablyNonNegative() const {
  return std::all_of(terms_.begin(), terms_.end(), [](const Term& t) { return t.coeff >= 0; });
}

SymExpr operator+(const SymExpr& a, const SymExpr& b) {
  SymExpr r = a;
  for (const auto& t : b.terms_) r.addTerm(t.atoms, t.coeff);
  return r;
}

SymExpr SymExpr::operator-() const {
  SymExpr r = *this;
  for (auto& t : r.terms_) t.coeff = -t.coeff;
  return r;
}

SymExpr operator-(const SymExpr& a, const SymExpr& b) { return a + (-b); }

SymExpr operator*(const SymExpr& a, const SymExpr& b) {
  SymExpr r;
  for (const auto& x : a.terms_)
    for (const auto& y : b.terms_) {
      std::vector<SymExpr::Atom> atoms = x.atoms;
      atoms.insert(atoms.end(), y.atoms.begin(), y.atoms.end());
      std::stable_sort(atoms.begin(), atoms.end(),
                       [](const SymExpr::Atom& p, const SymExpr::Atom& q) { return p.key < q.key; });
      r.addTerm(atoms, x.coeff * y.coeff);
    }
  return r;
}

namespace {
int64_t floorDivInt(int64_t a, int64_t c) { return a >= 0 ? a / c : -((-a + c - 1) / c); }
}  // namespace

SymExpr SymExpr::floorDiv(const SymExpr& a, int64_t c) {
  if (c == 1) return a;
  SymExpr quotient, remainder;
  for (const auto& t : a.terms_) {
    int64_t q = floorDivInt(t.coeff, c);
    quotient.addTerm(t.atoms, q);
    remainder.addTerm(t.atoms, t.coeff - q * c);
  }
  if (remainder.isConstant()) return quotient + SymExpr(floorDivInt(remainder.constantTerm(), c));
  std::string num = remainder.str();
  bool single = remainder.terms_.size() == 1 && remainder.terms_[0].coeff == 1;
  Atom atom{"floor(" + (single ? num : "(" + num + ")") + "/" + std::to_string(c) + ")",
            std::make_shared<const SymExpr>(std::move(remainder)), c};
  quotient.addTerm({atom}, 1);
  return quotient;
}

SymExpr SymExpr::ceilDiv(const SymExpr& a, int64_t c) { return floorDiv(a + SymExpr(c - 1), c); }

std::optional<SymExpr> SymExpr::exactDiv(const SymExpr& a, const SymExpr& b) {
  if (b.terms_.size() != 1 || b.terms_[0].coeff == 0) return std::nullopt;
  const Term& d = b.terms_[0];
  SymExpr r;
  for (const auto& t : a.terms_) {
    if (t.coeff % d.coeff != 0) return std::nullopt;
    // Remove d's atoms (a sorted multiset) from t's.
    std::vector<Atom> rest;
    size_t j = 0;
    for (const Atom& x : t.atoms) {
      if (j < d.atoms.size() && d.atoms[j].key == x.key) {
        ++j;
        continue;
      }
      rest.push_back(x);
    }
    if (j != d.atoms.size()) return std::nullopt;
    r.addTerm(rest, t.coeff / d.coeff);
  }
  return r;
}

bool SymExpr::operator==(const SymExpr& o) const {
  if (terms_.size() != o.terms_.size()) return false;
  for (size_t i = 0; i < terms_.size(); ++i)
    if (terms_[i].coeff != o.terms_[i].coeff || !atomsEqual(terms_[i].atoms, o.terms_[i].atoms)) return false;
  return true;
}

std::string SymExpr::str() const {
  if (terms_.empty()) return "0";
  std::string s;
  auto append = [&](const Term& t) {
    std::string body;
    if (t.atoms.empty()) {
      body = std::to_string(t.coeff);
    } else if (t.coeff == 1) {
      body = termKey(t.atoms);
    } else if (t.coeff == -1) {
      body = "-" + termKey(t.atoms);
    } else {
      body = std::to_string(t.coeff) + "*" + termKey(t.atoms);
    }
    if (!s.empty() && body[0] != '-') s += '+';
    s += body;
  };
  for (const auto& t : terms_)
    if (!t.atoms.empty()) append(t);
  if (terms_[0].atoms.empty()) append(terms_[0]);
  return s;
}

}  // namespace onnxtool
