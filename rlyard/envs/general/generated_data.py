"""The data of generated general tasks: seven table schemas and the rows of one task.

Each schema (`Domain`) is a small business table with the same roles under its own names and
column order: an id, a date, a name, a group (region, priority, warehouse ...), a reference to
a second table of people (the join), and a number (amount, minutes, units ...). Questions
(generated_questions.py) are written against the roles, so every question kind reads every
schema, and a held-out (schema, question) pair is new in its combination only.

Rows are drawn from a seeded RNG and kept small (8-14) so that a 135M model reads a whole table
within its context. Draws are arranged so every answer is unique: amounts are distinct (no tie
in a top-k), and the month totals have one largest.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

YEAR = 2024
MONTHS = tuple(f"{YEAR}-{m:02d}" for m in range(1, 7))
PEOPLE = ("Ana Lopez", "Ben Okafor", "Chen Wei", "Dara Singh", "Eva Novak", "Farid Haddad", "Greta Olsen",
          "Hiro Tanaka", "Ines Costa", "Jonas Berg", "Kofi Mensah", "Lena Fischer", "Marta Ruiz", "Nils Dahl")
COMPANIES = ("Acme Corp", "Birch Labs", "Cobalt Ltd", "Delta Foods", "Elm Studio", "Fjord Tech", "Granite Co",
             "Harbor Inc", "Iris Media", "Juno Retail", "Kite Works", "Lumen Health", "Maple Bank", "Nova Parts")
PRODUCTS = ("desk lamp", "office chair", "cable kit", "monitor arm", "label printer", "paper tray", "stapler",
            "webcam", "headset", "keyboard", "mouse pad", "power strip", "whiteboard", "laptop stand")
STAFF = ("Omar Farouk", "Priya Nair", "Quinn Avery", "Rosa Lind", "Sam Ortiz", "Tara Quinn", "Uma Patel",
         "Victor Hale")  # the people table: never a name of the main table, so a search for one finds only its row
CITIES = ("Lisbon", "Oslo", "Porto", "Lyon", "Graz", "Turin", "Ghent", "Basel", "Cork", "Bergen", "Malmo", "Split",
          "Brno", "Riga")
TOPICS = ("login fails", "slow page", "refund request", "broken link", "password reset", "missing invoice",
          "app crash", "export error", "wrong address", "duplicate charge", "sync delay", "email bounce",
          "upload stuck", "price mismatch")


@dataclass(frozen=True)
class Domain:
    """One table schema: its column names for each role, and the words that describe it."""

    name: str  # sales
    table: str  # orders: the file stem and the SQL table
    row: str  # order: one row, in prose and in tool names
    columns: tuple[str, ...]  # the header, in this schema's order; roles below name its columns
    key: str  # the id column
    prefix: str  # ids look like ORD-1042
    label: str  # the name column
    labels: tuple[str, ...]
    group: str  # the category column
    groups: tuple[str, ...]
    amount: str  # the number column
    measure: str  # what the number is, in prose ("amount in dollars")
    decimals: int  # 2 for money, 0 for counts and minutes, 1 for weights
    span: tuple[int, int]  # the number's range
    date: str
    ref: str  # the column that refers to the people table
    ref_table: str  # reps: the second table (file stem, SQL table)
    ref_row: str  # rep: one of them, in prose and in tool names
    ref_prefix: str  # R: their ids look like R3


DOMAINS: dict[str, Domain] = {d.name: d for d in (
    Domain("sales", "orders", "order", ("order_id", "order_date", "customer", "region", "rep_id", "amount"),
           "order_id", "ORD-", "customer", COMPANIES, "region", ("North", "South", "East", "West"),
           "amount", "order amount in dollars", 2, (40, 900), "order_date", "rep_id", "reps", "rep", "R"),
    Domain("tickets", "tickets", "ticket", ("ticket_id", "priority", "topic", "opened", "minutes", "agent_id"),
           "ticket_id", "TCK-", "topic", TOPICS, "priority", ("low", "normal", "high", "urgent"),
           "minutes", "minutes to resolve", 0, (5, 480), "opened", "agent_id", "agents", "agent", "A"),
    Domain("inventory", "stock", "item", ("sku", "item", "warehouse", "units", "counted", "supplier_id"),
           "sku", "SKU-", "item", PRODUCTS, "warehouse", ("Austin", "Denver", "Reno"),
           "units", "units in stock", 0, (3, 250), "counted", "supplier_id", "suppliers", "supplier", "S"),
    Domain("staff", "roster", "employee", ("employee_id", "name", "department", "manager_id", "start_date", "hours"),
           "employee_id", "E-", "name", PEOPLE, "department", ("Sales", "Support", "Finance", "Ops"),
           "hours", "hours worked this half-year", 0, (60, 700), "start_date", "manager_id", "managers", "manager", "M"),
    Domain("invoices", "invoices", "invoice", ("invoice_id", "client", "issued", "status", "total", "owner_id"),
           "invoice_id", "INV-", "client", COMPANIES, "status", ("paid", "unpaid", "overdue"),
           "total", "invoice total in dollars", 2, (120, 4000), "issued", "owner_id", "owners", "owner", "O"),
    Domain("shipments", "shipments", "shipment", ("shipment_id", "shipped", "carrier", "destination", "weight_kg",
                                                  "clerk_id"),
           "shipment_id", "SHP-", "destination", CITIES, "carrier", ("DHL", "UPS", "FedEx"),
           "weight_kg", "weight in kilograms", 1, (1, 90), "shipped", "clerk_id", "clerks", "clerk", "C"),
    Domain("expenses", "expenses", "expense", ("expense_id", "spent_on", "employee", "category", "cost", "approver_id"),
           "expense_id", "EXP-", "employee", PEOPLE, "category", ("travel", "meals", "software", "office"),
           "cost", "cost in dollars", 2, (8, 650), "spent_on", "approver_id", "approvers", "approver", "P"),
)}


@dataclass(frozen=True)
class Table:
    """One task's data: rows of the domain's table (dicts by column) and the people table."""

    domain: Domain
    rows: tuple[dict, ...]
    people: tuple[dict, ...]  # {ref column: id, "name": person}


def fmt(domain: Domain, value: float) -> str:
    """A number as the data writes it (and as the answer key expects it)."""
    return f"{value:.{domain.decimals}f}"


def number(domain: Domain, value: float) -> float | int:
    """A number rounded as the data holds it: an int for whole-number measures."""
    return int(round(value)) if domain.decimals == 0 else round(value, domain.decimals)


def make_table(domain: Domain, rng: random.Random, size: int) -> Table:
    """`size` rows with distinct amounts, every group present, one month with the largest total."""
    scale = 10 ** domain.decimals
    for _ in range(100):
        low, high = domain.span
        amounts = rng.sample(range(low * scale, high * scale), size)
        people = [{domain.ref: f"{domain.ref_prefix}{k}", "name": name}
                  for k, name in enumerate(rng.sample(STAFF, rng.randint(3, 4)), 1)]
        ids = rng.sample(range(1001, 1999), size)
        labels = rng.sample(domain.labels, size) if len(domain.labels) >= size else [rng.choice(domain.labels) for _ in ids]
        groups = list(domain.groups) + [rng.choice(domain.groups) for _ in range(size - len(domain.groups))]
        rng.shuffle(groups)
        rows = []
        for k in range(size):
            month = rng.choice(MONTHS)
            rows.append({domain.key: f"{domain.prefix}{ids[k]}", domain.date: f"{month}-{rng.randint(1, 28):02d}",
                         domain.label: labels[k], domain.group: groups[k], domain.ref: rng.choice(people)[domain.ref],
                         domain.amount: number(domain, amounts[k] / scale)})
        rows.sort(key=lambda r: r[domain.date])
        totals = sorted(month_totals(domain, rows).values(), reverse=True)
        if len(totals) < 2 or totals[0] != totals[1]:
            return Table(domain, tuple(rows), tuple(people))
    raise RuntimeError(f"{domain.name}: no table without a tie in 100 draws")


def month_totals(domain: Domain, rows) -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in rows:
        month = row[domain.date][:7]
        totals[month] = round(totals.get(month, 0.0) + row[domain.amount], 6)
    return totals


def csv_text(columns: tuple[str, ...], rows) -> str:
    """The rows as CSV (no value holds a comma or a quote)."""
    return "\n".join([",".join(columns)] + [",".join(fmt_cell(row[c]) for c in columns) for row in rows]) + "\n"


def fmt_cell(value) -> str:
    return f"{value:g}" if isinstance(value, float) and value == int(value) else str(value)


def sql_script(table: Table) -> str:
    """The SQLite script of the task's database: both tables, typed columns."""
    d = table.domain

    def create(name: str, columns, rows) -> list[str]:
        types = {c: "REAL" if c == d.amount and d.decimals else "INTEGER" if c == d.amount else "TEXT" for c in columns}
        lines = [f"CREATE TABLE {name} ({', '.join(f'{c} {types[c]}' for c in columns)});"]
        for row in rows:
            values = ", ".join(str(row[c]) if types[c] != "TEXT" else "'" + str(row[c]).replace("'", "''") + "'"
                               for c in columns)
            lines.append(f"INSERT INTO {name} VALUES ({values});")
        return lines

    return "\n".join(create(d.table, d.columns, table.rows) + create(d.ref_table, (d.ref, "name"), table.people)) + "\n"
