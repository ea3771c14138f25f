-- The return URIs the operator allows for each merchant. In production mode the hosted
-- payment page and the authorisation flow send a payer back only to a `return_uri` that one
-- of these covers (same scheme, host and port, and a path under the allowed one); sandbox
-- mode keeps them but accepts any return URI.
ALTER TABLE merchants ADD COLUMN return_uris text[] NOT NULL DEFAULT '{}';
