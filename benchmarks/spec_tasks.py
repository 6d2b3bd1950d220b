"""Chat tasks for measuring speculative acceptance on realistic text.

Two classes, written for this benchmark:

- "code": a source snippet and an instruction to change it, where the answer
  repeats most of the snippet (the case prompt lookup / n-gram drafting is
  for: long runs of the reply are already in the prompt);
- "prose": summaries and questions about a passage, where the reply reuses
  little of the prompt verbatim.

Each task is one user message for the default model's chat template
(SmolLM2-135M-Instruct); ``messages(task)`` gives the OpenAI-style list.
"""
from __future__ import annotations

from dataclasses import dataclass

CLASSES = ("code", "prose")


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    kind: str           # one of CLASSES
    instruction: str
    body: str           # the snippet or passage the instruction is about

    def __post_init__(self):
        if self.kind not in CLASSES:
            raise ValueError(f"task {self.name}: kind must be one of {CLASSES}, not {self.kind!r}")

    @property
    def prompt(self) -> str:
        return f"{self.instruction}\n\n{self.body}"


def messages(task: Task) -> list[dict]:
    return [{"role": "user", "content": task.prompt}]


# ---------------------------------------------------------------- code edits

_INVENTORY = '''```python
def restock_report(items, threshold=5):
    """Lines for every item whose stock is below the threshold."""
    report = []
    for item in items:
        stock = item["stock"]
        if stock < threshold:
            missing = threshold - stock
            report.append(f"{item['name']}: {stock} left, order {missing}")
    report.sort()
    return report


def total_value(items):
    value = 0.0
    for item in items:
        value += item["stock"] * item["price"]
    return value
```'''

_FETCH = '''```javascript
async function fetchUser(id) {
  const response = await fetch(`/api/users/${id}`);
  if (!response.ok) {
    throw new Error(`user ${id}: HTTP ${response.status}`);
  }
  const user = await response.json();
  return { id: user.id, name: user.name, email: user.email };
}

async function fetchTeam(ids) {
  const users = [];
  for (const id of ids) {
    users.push(await fetchUser(id));
  }
  return users;
}
```'''

_AVERAGE = '''```c
#include <stddef.h>

/* Mean of the values in [0, n); 0 for an empty array. */
double average(const double *values, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i <= n; i++) {
        sum += values[i];
    }
    if (n == 0) {
        return 0.0;
    }
    return sum / n;
}
```'''

_BACKUP = '''```python
import os
import shutil


def backup(source_dir, target_dir):
    print("backing up", source_dir)
    os.makedirs(target_dir, exist_ok=True)
    copied = 0
    for name in os.listdir(source_dir):
        src = os.path.join(source_dir, name)
        if os.path.isfile(src):
            shutil.copy2(src, os.path.join(target_dir, name))
            copied += 1
        else:
            print("skipping", src)
    print("copied", copied, "files")
    return copied
```'''

_CONFIG = '''```yaml
server:
  host: 0.0.0.0
  port: 8080
  workers: 4
database:
  host: db.internal
  port: 5432
  name: orders
  pool_size: 10
logging:
  level: info
  file: /var/log/orders/server.log
```'''

CODE = [
    Task("rename-var", "code",
         "Rename the variable `stock` to `on_hand` everywhere in this Python code. "
         "Reply with the complete code and nothing else.", _INVENTORY),
    Task("add-param", "code",
         "Add a `timeout` parameter in milliseconds to fetchUser, pass it to fetch through "
         "an AbortSignal, and let fetchTeam pass it on. Reply with the whole file.", _FETCH),
    Task("fix-bug", "code",
         "This C function reads one element past the end of the array. Fix the bug and "
         "reply with the corrected function only.", _AVERAGE),
    Task("print-to-logging", "code",
         "Replace every print call in this function with a call on a module-level logger "
         "from the logging module (info for progress, warning for skipped entries). "
         "Show the full updated code.", _BACKUP),
    Task("config-edit", "code",
         "Change the server port to 9090, the database pool size to 20 and the logging "
         "level to debug. Reply with the whole YAML file.", _CONFIG),
]


# ---------------------------------------------------------------- summaries and questions

_MEETING = (
    "Notes from Tuesday's planning meeting. The mobile team reported that the new login "
    "screen is finished, but the password reset flow still fails on older Android phones; "
    "Priya will look into it this week. Marketing wants the spring release to go out on "
    "the 14th so that it lines up with the trade fair, which leaves only nine working days "
    "for testing. Tom argued that we should drop the offline mode from this release rather "
    "than rush it, and most people agreed. The support team asked for a clearer error "
    "message when a payment is declined, since that is now the most common reason customers "
    "write in. Budget for the extra test devices was approved. The next meeting moves to "
    "Thursday because of the holiday.")

_RETURNS = (
    "Returns policy. Items bought in our online shop can be returned within 30 days of "
    "delivery, as long as they are unused and in their original packaging. Sale items can "
    "be returned within 14 days. To start a return, log in to your account, open the order "
    "and choose the items you want to send back; you will get a prepaid label by email. "
    "Refunds go to the original payment method within five working days after the parcel "
    "reaches our warehouse. Gift cards, opened software and personalised products cannot "
    "be returned. If an item arrives damaged, contact us within 48 hours with a photo and "
    "we will send a replacement at no cost.")

_BUG = (
    "Bug report #4127. After upgrading to version 3.2, the export button in the reports page "
    "does nothing when the report has more than about 5,000 rows. Smaller reports export "
    "fine. The browser console shows an out-of-memory warning from the spreadsheet library. "
    "The user is on a laptop with 8 GB of memory and uses the latest Chrome. Version 3.1 "
    "exported the same reports without trouble, and the release notes for 3.2 mention that "
    "exports now include cell formatting. The user needs the monthly sales report, which has "
    "about 12,000 rows, every first Monday of the month.")

_GARDEN = (
    "Tomatoes need at least six hours of direct sun a day and soil that drains well. Plant "
    "them after the last frost, when the ground has warmed up, and bury the stem deeper than "
    "it sat in the pot, because it grows new roots along the buried part. Water deeply but "
    "not every day: two or three times a week is usually enough, more often in a heat wave. "
    "Watering the soil rather than the leaves helps to prevent fungal disease. Tall varieties "
    "need a stake or a cage. Pick the fruit when it is fully coloured and slightly soft.")

PROSE = [
    Task("summarize-meeting", "prose",
         "Summarize these meeting notes in three short bullet points: decisions, open problems "
         "and dates.", _MEETING),
    Task("qa-returns", "prose",
         "A customer bought a discounted jacket 20 days ago and wants to return it. Using the "
         "policy below, explain in your own words whether they can and what they should do.",
         _RETURNS),
    Task("summarize-bug", "prose",
         "Explain in two or three sentences what most likely causes this bug and suggest a "
         "workaround for the user.", _BUG),
    Task("qa-garden", "prose",
         "Based on this text, answer: how often should I water tomatoes, and why should I "
         "avoid wetting the leaves? Answer briefly.", _GARDEN),
]

TASKS = CODE + PROSE


def by_name(names: str | None) -> list[Task]:
    """The tasks named in a comma list (None or "all": every task; "code"/"prose": a class)."""
    if names is None or names == "all":
        return list(TASKS)
    known = {t.name: t for t in TASKS}
    out = []
    for n in names.split(","):
        if n in CLASSES:
            out += [t for t in TASKS if t.kind == n]
        elif n in known:
            out.append(known[n])
        else:
            raise ValueError(f"unknown task {n!r}; known: {', '.join(known)} or {CLASSES}")
    return out
