"""Column schemas shown on each asset's page (dagster/column_schema), in the tables' column order."""

import dagster as dg

_LINE = [
    dg.TableColumn("partition_date", "date", "The order's day (the partition)."),
    dg.TableColumn("line_id", "varchar", "Business key of the order line."),
    dg.TableColumn("order_id", "varchar"),
    dg.TableColumn("customer_id", "varchar"),
    dg.TableColumn("country", "varchar", "Customer's country at order time (SCD2); 'unknown' if unresolved."),
    dg.TableColumn("tier", "varchar", "Customer's tier at order time (SCD2); 'unknown' if unresolved."),
    dg.TableColumn("sku", "varchar"),
    dg.TableColumn("quantity", "bigint"),
    dg.TableColumn("unit_price", "decimal(18,2)"),
    dg.TableColumn("unit_cost", "decimal(18,2)"),
]

STAGED_SCHEMA = dg.TableSchema(columns=[
    *_LINE,
    dg.TableColumn("order_time", "timestamp", "First event of the order: the time the SCD2 join uses."),
    dg.TableColumn("event_time", "timestamp"),
    dg.TableColumn("source_sequence", "bigint", "The winning record's source sequence."),
])

FACT_SCHEMA = dg.TableSchema(columns=[
    *_LINE,
    dg.TableColumn("gmv", "decimal(18,2)", "quantity x unit_price"),
    dg.TableColumn("cost", "decimal(18,2)", "quantity x unit_cost"),
    dg.TableColumn("gross_profit", "decimal(18,2)", "gmv - cost"),
    dg.TableColumn("event_time", "timestamp"),
    dg.TableColumn("source_sequence", "bigint"),
])

MART_SCHEMA = dg.TableSchema(columns=[
    dg.TableColumn("partition_date", "date"),
    dg.TableColumn("country", "varchar"),
    dg.TableColumn("tier", "varchar"),
    dg.TableColumn("lines", "bigint"),
    dg.TableColumn("orders", "bigint", "Distinct orders."),
    dg.TableColumn("units", "bigint"),
    dg.TableColumn("gmv", "decimal(18,2)"),
    dg.TableColumn("cost", "decimal(18,2)"),
    dg.TableColumn("gross_profit", "decimal(18,2)"),
])

RAW_SCHEMA = dg.TableSchema(columns=[
    dg.TableColumn("partition_date", "date", "The day of the raw file (the partition)."),
    dg.TableColumn("line_id", "varchar", "As received; may repeat (later source_sequence wins in staged)."),
    dg.TableColumn("order_id", "varchar"),
    dg.TableColumn("customer_id", "varchar"),
    dg.TableColumn("sku", "varchar"),
    dg.TableColumn("quantity", "bigint"),
    dg.TableColumn("unit_price", "decimal(18,2)"),
    dg.TableColumn("unit_cost", "decimal(18,2)"),
    dg.TableColumn("event_time", "timestamp"),
    dg.TableColumn("source_sequence", "bigint", "The source's sequence number of this record."),
    dg.TableColumn("extraction_batch", "varchar", "The landing batch the record came in."),
    dg.TableColumn("op", "varchar", "'delete' for a record that retracts its line_id, else null."),
])

CUSTOMERS_SCHEMA = dg.TableSchema(columns=[
    dg.TableColumn("customer_id", "varchar"),
    dg.TableColumn("country", "varchar"),
    dg.TableColumn("tier", "varchar"),
    dg.TableColumn("valid_from", "timestamp", "First instant this version holds (inclusive)."),
    dg.TableColumn("valid_to", "timestamp", "First instant it no longer holds (exclusive); null: current."),
])
