"""Double-entry ledger: accounts, transactions of balanced postings, and the invariant check."""
