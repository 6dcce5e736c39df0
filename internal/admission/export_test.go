package admission

// SweepGrace is sweepGrace, for the tests that move the ledger's clock past it.
const SweepGrace = sweepGrace
