"""What people see: the developer console, the hosted payment page, the mock bank and the
error catalogue."""
