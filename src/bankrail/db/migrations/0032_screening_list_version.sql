-- The screening list's version: a new random id in the same transaction as every change of
-- the list, whoever makes it (the release before too: the trigger makes it, not the caller).
-- A process keeps the skeletons of the version it read last, and the acceptance read
-- (bankrail_read_payout_batch) returns them again only when the version differs, so that a
-- batch of payouts does not read the whole list (payouts/acceptance.py). The id is random, not
-- a counter: two databases (one cloned from the other) share a version only while they share
-- the list.
CREATE TABLE screening_list_version (
    id      integer PRIMARY KEY CHECK (id = 1),
    version uuid NOT NULL
);
INSERT INTO screening_list_version (id, version) VALUES (1, gen_random_uuid());

-- Defined again, as it stays, in db/functions/payout_acceptance.sql.
CREATE FUNCTION bankrail_screening_list_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE screening_list_version SET version = gen_random_uuid() WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER screening_list_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON screening_list
    FOR EACH STATEMENT EXECUTE FUNCTION bankrail_screening_list_changed();
