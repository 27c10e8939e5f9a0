-- Whether this publication wrote the day afresh because its published rows differed from its ledger row (changed
-- behind it): what readers of the tables saw moved, though the ledger's before and after may agree. The change notice
-- and Slack tell it from here (before, only the day's event did). Null on rows written before.
alter table audit.publications add column repaired boolean;
