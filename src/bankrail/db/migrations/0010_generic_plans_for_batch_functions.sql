-- The batch functions of the payout path are planned once per connection, not at every call
-- (performance, issue 7).
--
-- A PL/pgSQL statement that reads the function's arguments or variables is planned afresh
-- for each of its first five executions (a custom plan for those values), and then for
-- ever after if its generic plan, costed without the values, looks dearer. Here it always
-- does: the arguments are arrays and jsonb documents whose size the planner cannot see, and
-- the disabled plan types of migration 0008 weigh on every estimate. So every call planned
-- each of its statements again, to the same plan: a profile of one-payout acceptance calls
-- found a tenth of PostgreSQL's time in the planner. Under load, when calls carry many
-- payouts, that share is small; at moderate load, when they carry one to three, it is not.
-- The plans are the same either way (index probes, forced by migration 0008), so the
-- generic one is used from the first call.
ALTER FUNCTION bankrail_accept_v3_payouts SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION bankrail_advance_payouts SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION bankrail_advance_leased_payouts SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION bankrail_lease_payout_jobs SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION bankrail_ledger_post SET plan_cache_mode = force_generic_plan;
