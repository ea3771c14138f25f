-- AML screening compares names by their skeleton (rails/screening.py `name_skeleton`: NFKC,
-- default-ignorables removed, case folded, accents dropped, Unicode confusables mapped,
-- punctuation removed, whitespace collapsed). `normalised_name` now holds a listed name's
-- skeleton, and `skeleton_version` which version of the rule and of its Unicode data made it:
-- NULL for rows written before this migration (or by the release before it during an
-- upgrade). Every process, as it starts, computes again in Python the skeletons of another
-- version (`refresh_screening_list`); SQL cannot compute them.
ALTER TABLE screening_list ADD COLUMN skeleton_version text;
