"""Generate the sample share ``data/sample/``: a small knowledge base of a fictional product team.

Run from the repository root::

    .venv/bin/python data/make_sample.py            # writes data/sample/
    .venv/bin/python data/make_sample.py OUT_DIR     # writes elsewhere

The company is *Tessera Labs*, which sells *Tessera*, a hosted product-analytics service.
The documents cover onboarding, deployment, the REST API, security policy, billing, an
incident postmortem, the roadmap, support tickets, the service catalog, release notes, and
two Chinese documents (a FAQ in UTF-8 Markdown and an operations runbook in GBK, the way a
Windows editor in China saves plain text). Every file holds distinct facts so that search
demos and evaluation queries have one right answer.

Output is deterministic: fixed metadata dates, ZIP entries with a fixed timestamp, and PDFs
saved without a fresh random ID, so re-running produces identical bytes.
Needs pymupdf, openpyxl, python-pptx and python-docx (a dev-only tool).
"""

from __future__ import annotations

import io
import json
import re
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import pymupdf

FIXED_DT = datetime(2024, 4, 2, 9, 30, 0)
FIXED_ZIP_DT = (2024, 4, 2, 9, 30, 0)
FIXED_ISO = "2024-04-02T09:30:00Z"


# --- helpers ------------------------------------------------------------------
def _normalize_ooxml(data: bytes) -> bytes:
    """Rewrite an OOXML zip with fixed entry times and fixed core.xml dates (determinism)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                text = body.decode("utf-8")
                text = re.sub(
                    r"(<dcterms:(created|modified)[^>]*>)[^<]*(</dcterms:)",
                    rf"\g<1>{FIXED_ISO}\g<3>",
                    text,
                )
                body = text.encode("utf-8")
            new = zipfile.ZipInfo(info.filename, date_time=FIXED_ZIP_DT)
            new.compress_type = zipfile.ZIP_DEFLATED
            new.external_attr = 0o644 << 16
            dst.writestr(new, body)
    return out.getvalue()


def _write(path: Path, data: bytes | str, encoding: str = "utf-8") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode(encoding)
    path.write_bytes(data)


# --- PDF ----------------------------------------------------------------------
class _PdfWriter:
    """Flows headings and paragraphs onto A4 pages with pymupdf's base-14 fonts."""

    MARGIN = 60
    WIDTH, HEIGHT = pymupdf.paper_size("a4")

    def __init__(self, footer: str) -> None:
        self.doc = pymupdf.open()
        self.footer = footer
        self.page: pymupdf.Page | None = None
        self.y = 0.0

    def new_page(self) -> None:
        self.page = self.doc.new_page(width=self.WIDTH, height=self.HEIGHT)
        self.y = self.MARGIN
        number = self.doc.page_count
        self.page.insert_text(
            (self.MARGIN, self.HEIGHT - 30), f"{self.footer} - page {number}",
            fontsize=8, fontname="helv", color=(0.4, 0.4, 0.4),
        )

    def _box(self, text: str, size: float, font: str, gap: float) -> None:
        if self.page is None:
            self.new_page()
        rect = pymupdf.Rect(self.MARGIN, self.y, self.WIDTH - self.MARGIN, self.HEIGHT - 50)
        # insert_textbox returns the unused height (negative: it did not fit)
        left = self.page.insert_textbox(rect, text, fontsize=size, fontname=font)
        if left < 0:
            self.new_page()
            rect = pymupdf.Rect(self.MARGIN, self.y, self.WIDTH - self.MARGIN, self.HEIGHT - 50)
            left = self.page.insert_textbox(rect, text, fontsize=size, fontname=font)
        self.y = rect.y1 - left + gap

    def heading(self, text: str, level: int) -> None:
        size = {1: 20, 2: 15, 3: 12.5}[level]
        if self.y > self.HEIGHT - 160:  # never leave a heading alone at the foot of a page
            self.new_page()
        self._box(text, size, "hebo", 6 if level > 1 else 10)

    def paragraph(self, text: str) -> None:
        self._box(text, 10.5, "helv", 8)

    def table(self, rows: list[list[str]]) -> None:
        """Draws a ruled grid so pymupdf's find_tables() can recover it."""
        widths = [150, 130, 195]
        row_h = 20
        if self.y + row_h * len(rows) > self.HEIGHT - 60:
            self.new_page()
        x0, y = self.MARGIN, self.y
        for r, row in enumerate(rows):
            x = x0
            for c, cell in enumerate(row):
                rect = pymupdf.Rect(x, y, x + widths[c], y + row_h)
                self.page.draw_rect(rect, color=(0, 0, 0), width=0.7)
                self.page.insert_text(
                    (x + 4, y + 14), cell, fontsize=9.5, fontname="hebo" if r == 0 else "helv"
                )
                x += widths[c]
            y += row_h
        self.y = y + 14

    def save(self, path: Path, title: str) -> None:
        self.doc.set_metadata(
            {
                "title": title,
                "author": "Tessera Labs Security Team",
                "creator": "data/make_sample.py",
                "producer": "pymupdf",
                "creationDate": "D:20240402093000Z",
                "modDate": "D:20240402093000Z",
            }
        )
        data = self.doc.tobytes(garbage=3, deflate=True, no_new_id=True)
        _write(path, data)


def make_pdf(path: Path) -> None:
    w = _PdfWriter("Tessera Labs - Information Security Policy v3.2")
    for kind, text in SECURITY_POLICY:
        if kind == "h1":
            w.heading(text, 1)
        elif kind == "h2":
            w.heading(text, 2)
        elif kind == "h3":
            w.heading(text, 3)
        elif kind == "table":
            w.table(RETENTION_TABLE)
        elif kind == "page":
            w.new_page()
        else:
            w.paragraph(text)
    w.save(path, "Tessera Information Security Policy")


# --- DOCX ---------------------------------------------------------------------
def make_docx(path: Path) -> None:
    import docx  # python-docx: a dev tool used only here

    d = docx.Document()
    props = d.core_properties
    props.author = "Priya Raman"
    props.title = POSTMORTEM["title"]
    props.created = props.modified = props.last_printed = FIXED_DT
    props.revision = 1
    d.add_heading(POSTMORTEM["title"], level=1)
    for section, body in POSTMORTEM["sections"]:
        d.add_heading(section, level=2)
        if isinstance(body, list) and body and isinstance(body[0], tuple):
            table = d.add_table(rows=1, cols=2)
            table.style = "Table Grid"
            table.rows[0].cells[0].text = "Time (UTC)"
            table.rows[0].cells[1].text = "Event"
            for when, what in body:
                cells = table.add_row().cells
                cells[0].text, cells[1].text = when, what
        elif isinstance(body, list):
            for item in body:
                d.add_paragraph(item, style="List Bullet")
        else:
            for para in body.strip().split("\n\n"):
                d.add_paragraph(para.replace("\n", " "))
    buf = io.BytesIO()
    d.save(buf)
    _write(path, _normalize_ooxml(buf.getvalue()))


# --- XLSX ---------------------------------------------------------------------
def make_xlsx(path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    wb.properties.creator = "Tessera Finance"
    wb.properties.created = FIXED_DT
    plans = wb.active
    plans.title = "Plans"
    plans.append(["Plan", "Monthly price (USD)", "Annual price (USD)", "Seats included",
                  "Events per month", "Data retention (days)", "Support"])
    plans.append(["Starter", 49, 490, 3, "1 million", 90, "Email, 2 business days"])
    plans.append(["Team", 299, 2990, 15, "20 million", 400, "Email and chat, 1 business day"])
    plans.append(["Business", 1199, 11990, 50, "200 million", 730, "24x7, 4-hour response"])
    plans.append(["Enterprise", "Custom", "Custom", "Unlimited", "Custom", 1095,
                  "24x7, 1-hour response, named TAM"])

    inv = wb.create_sheet("Invoices 2024-Q1")
    inv.append(["Invoice", "Customer", "Plan", "Issued", "Amount (USD)", "Status"])
    customers = ["Acme Retail", "Blue Heron Media", "Cobalt Freight", "Dunmore Bank",
                 "Everfield Health", "Foxglove Games", "Granite Logistics", "Harbor & Pine"]
    plan_for = ["Team", "Business", "Starter", "Enterprise", "Business", "Team", "Starter", "Team"]
    price = {"Starter": 49, "Team": 299, "Business": 1199, "Enterprise": 8400}
    statuses = ["paid", "paid", "paid", "overdue", "paid", "refunded (prorated)", "paid", "void"]
    n = 0
    for month in (1, 2, 3):
        for i, cust in enumerate(customers):
            n += 1
            inv.append([f"INV-2024-{n:04d}", cust, plan_for[i], f"2024-{month:02d}-01",
                        price[plan_for[i]], statuses[(i + month) % len(statuses)]])

    zh = wb.create_sheet("价格说明")
    zh.append(["套餐", "月费（美元）", "说明"])
    zh.append(["入门版", 49, "适合小团队试用，包含 3 个席位，数据保留 90 天"])
    zh.append(["团队版", 299, "包含 15 个席位，支持 SSO 单点登录，数据保留 400 天"])
    zh.append(["企业版", "面议", "支持私有化部署、专属客户经理和 1 小时响应"])

    buf = io.BytesIO()
    wb.save(buf)
    _write(path, _normalize_ooxml(buf.getvalue()))


# --- PPTX ---------------------------------------------------------------------
def make_pptx(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    prs.core_properties.author = "Tessera Product"
    prs.core_properties.created = prs.core_properties.modified = FIXED_DT
    prs.core_properties.revision = 1
    for slide_spec in ROADMAP_SLIDES:
        if slide_spec.get("table"):
            slide = prs.slides.add_slide(prs.slide_layouts[5])  # title only
            slide.shapes.title.text = slide_spec["title"]
            rows = slide_spec["table"]
            shape = slide.shapes.add_table(len(rows), len(rows[0]), Inches(0.5), Inches(1.6),
                                           Inches(9), Inches(0.4) * len(rows))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    shape.table.cell(r, c).text = cell
        else:
            layout = prs.slide_layouts[0 if slide_spec.get("cover") else 1]
            slide = prs.slides.add_slide(layout)
            slide.shapes.title.text = slide_spec["title"]
            body = slide.placeholders[1].text_frame
            body.text = slide_spec["bullets"][0]
            for bullet in slide_spec["bullets"][1:]:
                body.add_paragraph().text = bullet
        if slide_spec.get("notes"):
            slide.notes_slide.notes_text_frame.text = slide_spec["notes"]
    buf = io.BytesIO()
    prs.save(buf)
    _write(path, _normalize_ooxml(buf.getvalue()))


# --- CSV ----------------------------------------------------------------------
def make_csv(path: Path) -> None:
    import csv

    rows = [
        ("T-1001", "2024-01-03", "Acme Retail", "Team", "billing", "normal",
         "Charged twice for January after upgrading mid-cycle", "resolved"),
        ("T-1002", "2024-01-04", "Cobalt Freight", "Starter", "login", "high",
         "SSO login loops back to the sign-in page in Safari", "resolved"),
        ("T-1003", "2024-01-09", "Dunmore Bank", "Enterprise", "security", "high",
         "Asks for SOC 2 Type II report and pen-test summary", "resolved"),
        ("T-1004", "2024-01-15", "Foxglove Games", "Team", "api", "normal",
         "429 Too Many Requests when backfilling events at 900 req/min", "resolved"),
        ("T-1005", "2024-01-22", "Blue Heron Media", "Business", "data", "normal",
         "CSV export of funnel report truncates at 100k rows", "open"),
        ("T-1006", "2024-02-01", "Granite Logistics", "Starter", "billing", "low",
         "Needs invoices addressed to a different legal entity", "resolved"),
        ("T-1007", "2024-02-07", "Everfield Health", "Business", "security", "high",
         "Requests a signed BAA before sending health data", "escalated"),
        ("T-1008", "2024-02-13", "Harbor & Pine", "Team", "dashboards", "low",
         "Dashboard timezone shows UTC instead of Europe/Lisbon", "resolved"),
        ("T-1009", "2024-02-20", "Acme Retail", "Team", "api", "normal",
         "Webhook signatures fail verification after secret rotation", "resolved"),
        ("T-1010", "2024-03-12", "Dunmore Bank", "Enterprise", "outage", "urgent",
         "Ingestion API returning 503 since 14:05 UTC (incident INC-2024-031)", "resolved"),
        ("T-1011", "2024-03-12", "Foxglove Games", "Team", "outage", "urgent",
         "Dashboards stuck loading; events missing for the last hour", "resolved"),
        ("T-1012", "2024-03-18", "Cobalt Freight", "Starter", "billing", "normal",
         "Wants a refund after downgrading from Team to Starter", "resolved"),
        ("T-1013", "2024-03-25", "Blue Heron Media", "Business", "data", "normal",
         "Asks how to delete a single user's events for a GDPR erasure request", "open"),
        ("T-1014", "2024-03-28", "Harbor & Pine", "Team", "login", "normal",
         "MFA codes rejected; phone clock was 3 minutes off", "resolved"),
    ]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["ticket_id", "created", "customer", "plan", "category", "priority",
                     "summary", "status"])
    writer.writerows(rows)
    _write(path, buf.getvalue())


# --- content (kept at the end of this file: it is long and only prose) ----------
# Defined below; main() runs after the whole module has loaded.


# --- main -----------------------------------------------------------------------
def main(out: Path) -> None:
    _write(out / "handbook" / "onboarding.md", ONBOARDING_MD)
    _write(out / "engineering" / "deployment.md", DEPLOYMENT_MD)
    _write(out / "engineering" / "api-reference.html", API_HTML)
    _write(out / "engineering" / "service-catalog.json",
           json.dumps(SERVICE_CATALOG, indent=2, ensure_ascii=False) + "\n")
    _write(out / "engineering" / "scripts" / "rotate_api_keys.py", SCRIPT_PY)
    make_pdf(out / "policies" / "security-policy.pdf")
    make_docx(out / "incidents" / "2024-03-12-ingestion-outage.docx")
    make_xlsx(out / "billing" / "plans-and-invoices.xlsx")
    make_pptx(out / "product" / "roadmap-2024.pptx")
    make_csv(out / "support" / "tickets-2024-q1.csv")
    _write(out / "product" / "release-notes.txt", RELEASE_NOTES_TXT)
    _write(out / "zh" / "faq.md", FAQ_ZH_MD)
    # GBK on purpose: a plain-text file as a Chinese Windows editor saves it.
    _write(out / "zh" / "ops-runbook.txt", RUNBOOK_ZH_TXT, encoding="gbk")



# ==================================================================================
# Content
# ==================================================================================
ONBOARDING_MD = """\
# Engineering Onboarding Handbook

Welcome to the Tessera platform team. This handbook walks you through your first two weeks.
Tessera is a hosted product-analytics service: customers send events through the ingestion
API, we store them in ClickHouse, and they explore them in dashboards and funnels.

## Week one

Your first week is about access, context and one small change shipped to production.
Your onboarding buddy is assigned by your manager before your first day and pairs with you
for at least one hour every day of the first week.

### Accounts and access

You get accounts for Google Workspace, GitHub (organisation `tessera-labs`), Linear, Slack,
1Password and the AWS SSO portal on day one. Production access is not granted on day one:
it requires the security awareness training and a signed acceptable-use policy, and it is
approved by your manager in the access-request form. Expect it by day three.

Hardware keys are mandatory. IT ships two YubiKeys to new engineers; register both in
Google Workspace and in AWS SSO before you request production access.

### Your first deploy

Every new engineer ships a change to production in week one. Pick an issue labelled
`good-first-deploy` in Linear, open a pull request, get one approving review, and follow
the deployment guide. Your buddy watches the canary with you the first time.

## Week two

In week two you join the on-call rotation as a shadow and take ownership of one small
feature. You also attend the weekly architecture review on Thursday at 16:00 CET.

### On-call shadowing

Shadows receive the same PagerDuty pages as the primary but are not expected to respond
alone. After two shadow weeks you join the primary rotation. The on-call handbook explains
severities: SEV1 means customer data is lost or the ingestion API is down for everyone.

### Local environment

Clone the `tessera` monorepo and run `make bootstrap`. It installs Python 3.11 through
`uv`, Node 20, and starts ClickHouse, Postgres and Redis with Docker Compose. A full
bootstrap takes about twelve minutes on a company laptop. If `make bootstrap` fails on an
Apple Silicon laptop, set `DOCKER_DEFAULT_PLATFORM=linux/arm64` and retry.

## Who to ask

- Access and laptops: IT in `#help-it`.
- Deployments and CI: the platform team in `#platform`.
- Billing questions from customers: the finance team in `#billing-ops`.
- Anything security related, including a lost YubiKey: `#security`, or page the security
  on-call if it is urgent.
"""

DEPLOYMENT_MD = """\
# Deployment Guide

This guide describes how Tessera services get from a merged pull request to production.
All services deploy through the same pipeline: GitHub Actions builds an image, Argo CD syncs
it to Kubernetes, and Argo Rollouts runs a canary.

## Environments

We run three environments. `dev` is rebuilt from `main` on every merge. `staging` mirrors
production with anonymised data and receives every release candidate. `production` runs in
two AWS regions, eu-west-1 (Ireland) and us-east-2 (Ohio); EU customers' data never leaves
eu-west-1.

## Release process

### Build and tag

A merge to `main` builds an image tagged with the short commit SHA. Release candidates are
tagged `rc-YYYYMMDD-N` and promoted to staging automatically.

### Canary

Production deploys start with a canary that receives 5% of traffic for 15 minutes, then 25%
for 15 minutes, then 100%. The rollout pauses automatically when the canary's error rate is
more than 0.5 percentage points above the stable version, or when p95 latency of the
ingestion API rises above 300 ms.

### Rollback

To roll back, run `tessera deploy rollback SERVICE --to PREVIOUS_TAG`, or press *Abort* in
the Argo Rollouts dashboard. A rollback takes under three minutes because the previous
ReplicaSet is kept warm for 24 hours after each deploy. Announce every rollback in
`#deploys` with the reason.

## Deploy freezes

There are no production deploys on Fridays after 15:00 UTC, on weekends, or during the
end-of-quarter freeze (the last three business days of each quarter), unless the change
fixes a SEV1 or SEV2 incident and the incident commander approves it.

## Database migrations

Migrations must be backwards compatible with the previous release, because the canary and
the stable version share one database. Split destructive changes into two releases: first
stop reading the column, then drop it in a later release. Migrations that lock a table with
more than one million rows need a review from the data platform team.
"""

API_HTML = """\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tessera REST API v2 reference</title>
<style>body { font-family: sans-serif; } nav a { margin-right: 1em; }</style>
<script>window.analytics = window.analytics || [];</script>
</head>
<body>
<header class="site-header">
  <a href="/">Tessera Developers</a>
  <nav>
    <a href="/docs">Docs</a> <a href="/api">API</a> <a href="/changelog">Changelog</a>
    <a href="/status">Status</a> <a href="/login">Sign in</a>
  </nav>
</header>
<aside class="sidebar">
  <ul><li><a href="#auth">Authentication</a></li><li><a href="#limits">Rate limits</a></li>
  <li><a href="#endpoints">Endpoints</a></li><li><a href="#errors">Errors</a></li></ul>
</aside>
<main>
<h1>Tessera REST API v2</h1>
<p>The Tessera API lets you send events, manage projects and export query results. All
requests go to <code>https://api.tessera.example/v2</code> over HTTPS; plain HTTP requests
are rejected with status 403.</p>

<h2 id="auth">Authentication</h2>
<p>Authenticate with a project API key in the <code>Authorization</code> header:
<code>Authorization: Bearer tsk_live_...</code>. Keys are created in
<em>Project settings &rarr; API keys</em>. Live keys start with <code>tsk_live_</code> and test
keys with <code>tsk_test_</code>. Keys are shown only once; store them in a secret manager.
Rotate keys at least every 90 days; a rotated key keeps working for a 24-hour grace period.</p>

<h2 id="limits">Rate limits</h2>
<p>Each API key may make 600 requests per minute, with bursts of up to 100 requests per
second. The ingestion endpoint accepts batches of up to 500 events or 1 MB per request,
whichever comes first. When you exceed a limit the API answers <code>429 Too Many
Requests</code> with a <code>Retry-After</code> header giving the seconds to wait.</p>

<h2 id="endpoints">Endpoints</h2>
<h3>POST /v2/events</h3>
<p>Sends a batch of events. Each event needs <code>name</code>, <code>user_id</code> and
<code>timestamp</code> (ISO 8601); events older than 7 days are rejected. The response lists
accepted and rejected events with a reason for each rejection.</p>
<h3>GET /v2/projects</h3>
<p>Lists the projects the key can access, 50 per page. Use the <code>cursor</code> from the
response to fetch the next page.</p>
<h3>POST /v2/exports</h3>
<p>Starts an asynchronous export of a saved query to CSV or Parquet. Poll
<code>GET /v2/exports/{id}</code> until <code>status</code> is <code>done</code>; the download
link expires after one hour.</p>

<h2 id="errors">Errors</h2>
<table>
<tr><th>Status</th><th>Code</th><th>Meaning</th></tr>
<tr><td>400</td><td>invalid_event</td><td>An event is missing a required field.</td></tr>
<tr><td>401</td><td>invalid_key</td><td>The API key is unknown, revoked or expired.</td></tr>
<tr><td>413</td><td>batch_too_large</td><td>The batch exceeds 500 events or 1 MB.</td></tr>
<tr><td>429</td><td>rate_limited</td><td>Too many requests; honour Retry-After.</td></tr>
<tr><td>503</td><td>ingestion_paused</td><td>Ingestion is paused during an incident; retry with backoff.</td></tr>
</table>
</main>
<footer>
  <p>&copy; 2024 Tessera Labs. <a href="/privacy">Privacy</a> &middot; <a href="/terms">Terms</a>
  &middot; <a href="/cookies">Cookie settings</a></p>
</footer>
</body>
</html>
"""

SECURITY_POLICY = [
    ("h1", "Tessera Information Security Policy"),
    ("p", "Version 3.2, approved by the Chief Information Security Officer on 2 April 2024. "
          "This policy applies to every employee, contractor and system of Tessera Labs. "
          "Exceptions need written approval from the CISO and are reviewed every six months."),
    ("h2", "1. Access Control"),
    ("p", "Access follows least privilege: people get the access their current role needs "
          "and nothing more. Production access is granted through AWS SSO for at most "
          "twelve hours at a time and every session is logged."),
    ("h3", "1.1 Authentication"),
    ("p", "Multi-factor authentication is mandatory for every account that supports it. "
          "Administrators and anyone with production access must use a hardware security "
          "key (FIDO2); SMS codes are not accepted as a second factor. Passwords must be at "
          "least 14 characters long and are stored in the company password manager."),
    ("h3", "1.2 Access Reviews"),
    ("p", "Managers review their team's access every quarter. Access of people who leave "
          "the company is revoked within four hours of their last working hour; IT runs the "
          "offboarding checklist the same day."),
    ("page", ""),
    ("h2", "2. Data Protection"),
    ("p", "Customer data is classified as Restricted. It is encrypted at rest with AES-256 "
          "through AWS KMS and in transit with TLS 1.2 or newer. Customer data must never be "
          "copied to laptops, personal storage or third-party tools that are not on the "
          "approved vendor list."),
    ("h3", "2.1 Data Retention"),
    ("p", "We keep data only as long as the schedule below allows. Deletion jobs run daily "
          "and their results are reported to the security team every week."),
    ("table", ""),
    ("p", "When a customer closes their account, all their event data is deleted within "
          "30 days, and from backups within 35 days."),
    ("page", ""),
    ("h2", "3. Vulnerability Management"),
    ("p", "Dependencies are scanned on every pull request. Critical vulnerabilities in "
          "production must be fixed within 7 days, high within 30 days and medium within 90 "
          "days. An external penetration test runs every year and after every major "
          "architecture change."),
    ("h3", "3.1 Secrets"),
    ("p", "Secrets live in AWS Secrets Manager or 1Password, never in source code or "
          "container images. A leaked secret is rotated immediately and the leak is "
          "reported as a security incident, even when the secret was only exposed "
          "internally."),
    ("page", ""),
    ("h2", "4. Incident Response"),
    ("p", "Anyone who suspects a security incident reports it in the #security channel or "
          "pages the security on-call. The incident commander decides within one hour "
          "whether customers must be notified. Customers affected by a personal data breach "
          "are notified within 72 hours of its discovery, as GDPR requires."),
    ("h3", "4.1 Evidence"),
    ("p", "Do not wipe or reimage a compromised machine before the security team has taken "
          "a disk image. Keep logs of affected systems for at least one year."),
    ("page", ""),
    ("h2", "5. Acceptable Use"),
    ("p", "Company laptops must run full-disk encryption, automatic updates and the endpoint "
          "agent. Screens lock after five minutes of inactivity. Lost or stolen devices are "
          "reported to IT within one hour so they can be wiped remotely."),
    ("h3", "5.1 Remote Work"),
    ("p", "Work from public networks only through the company VPN. Do not discuss customer "
          "incidents in public places, and use a privacy screen when working on trains or "
          "in cafes."),
    ("h2", "6. Vendor Management"),
    ("p", "A new vendor that will process customer data needs a security review before the "
          "contract is signed: the vendor's SOC 2 Type II or ISO 27001 report, a data "
          "processing agreement, and a list of its sub-processors. Vendors are reviewed again "
          "every year, and the approved vendor list is published on the intranet."),
    ("p", "Violations of this policy may lead to disciplinary action up to termination of "
          "employment or contract."),
]

RETENTION_TABLE = [
    ["Data", "Retention", "Deleted by"],
    ["Raw events (Starter plan)", "90 days", "Nightly partition drop"],
    ["Raw events (Team plan)", "400 days", "Nightly partition drop"],
    ["Application logs", "30 days", "CloudWatch lifecycle rule"],
    ["Audit logs", "7 years", "S3 Object Lock expiry"],
    ["Database backups", "35 days", "AWS Backup plan"],
]

POSTMORTEM = {
    "title": "Postmortem: Ingestion API outage on 12 March 2024",
    "sections": [
        ("Summary", """\
On 12 March 2024 the Tessera ingestion API returned HTTP 503 for 47 minutes, from 14:05 to
14:52 UTC. About 38% of events sent during the outage were rejected; customers whose SDKs
retried with backoff lost no data, but server-to-server integrations without retries lost an
estimated 2.1 million events across 312 projects. Dashboards showed stale data for up to 90
minutes. The incident was classified SEV1 (INC-2024-031).

The root cause was an expired TLS certificate on the internal load balancer in front of the
Kafka REST proxy. The certificate had been issued manually in 2023 and was not managed by
cert-manager, so it was neither renewed nor monitored."""),
        ("Timeline", [
            ("14:05", "Certificate on kafka-rest-internal expires; ingestion pods start failing health checks."),
            ("14:09", "PagerDuty pages the platform on-call for the ingestion error-rate alert."),
            ("14:17", "Incident declared SEV1; Dana Okafor becomes incident commander."),
            ("14:31", "Expired certificate identified as the cause from the proxy's TLS handshake errors."),
            ("14:44", "New certificate issued with cert-manager and rolled out to the load balancer."),
            ("14:52", "Error rate back to normal; backlog drained by 15:35."),
        ]),
        ("Impact", """\
312 projects lost events; 41 customers opened support tickets. Enterprise customers were
credited 10% of their March invoice under the 99.9% availability SLA. No data was exposed
and no security boundary was crossed."""),
        ("What went well", [
            "The error-rate alert fired within four minutes.",
            "SDK clients with retries recovered without data loss.",
            "The status page was updated within ten minutes of the page.",
        ]),
        ("What went wrong", [
            "One certificate was outside cert-manager and had no expiry monitoring.",
            "The runbook did not mention the internal load balancer at all.",
            "Health checks failed closed, taking every ingestion pod out of rotation at once.",
        ]),
        ("Action items", [
            "Move every internal certificate to cert-manager (owner: platform team, due 2024-04-15).",
            "Alert 21 days before any certificate expires (owner: SRE, due 2024-03-29).",
            "Add a server-side retry buffer so rejected batches are replayed (owner: ingestion team, due Q2).",
            "Document the load balancer path in the ingestion runbook (owner: Dana Okafor, due 2024-03-22).",
        ]),
    ],
}

ROADMAP_SLIDES = [
    {"title": "Tessera Product Roadmap 2024", "cover": True,
     "bullets": ["Product team all-hands, January 2024"]},
    {"title": "Where we are", "bullets": [
        "1,840 paying customers at the end of 2023, up from 1,210",
        "Net revenue retention 118%",
        "Top churn reason: slow dashboards on projects with more than 1 billion events",
    ], "notes": "Mention that the churn analysis comes from the Q4 exit survey (n=96)."},
    {"title": "Q1: Faster dashboards", "bullets": [
        "Move dashboard queries to ClickHouse projections",
        "Target: p95 dashboard load under 2 seconds for 1 billion events",
        "Cache warmed queries for the 20 most used dashboards per project",
    ]},
    {"title": "Q2: Warehouse sync", "bullets": [
        "Two-way sync with Snowflake and BigQuery",
        "Scheduled exports every 15 minutes",
        "Ships behind the warehouse-sync feature flag for Business and Enterprise plans",
    ]},
    {"title": "Q3 and Q4: AI insights and EU data residency", "bullets": [
        "Natural-language questions over funnels and retention",
        "Anomaly alerts on key metrics",
        "A second EU region (Frankfurt) for customers who need data in Germany",
    ]},
    {"title": "Milestones", "table": [
        ["Quarter", "Milestone", "Owner"],
        ["Q1", "Dashboard p95 under 2 s", "Query team"],
        ["Q2", "Warehouse sync GA", "Integrations team"],
        ["Q3", "AI insights beta", "Insights team"],
        ["Q4", "Frankfurt region live", "Platform team"],
    ]},
]

SERVICE_CATALOG = {
    "catalog_version": 7,
    "updated": "2024-04-02",
    "services": [
        {"name": "ingest-api", "owner": "ingestion team", "tier": 1,
         "slo": {"availability": "99.95%", "p95_latency_ms": 300},
         "on_call": "platform-primary", "repository": "tessera/services/ingest-api",
         "depends_on": ["kafka-rest-internal", "auth-service"],
         "description": "Receives event batches from SDKs and server integrations."},
        {"name": "query-engine", "owner": "query team", "tier": 1,
         "slo": {"availability": "99.9%", "p95_latency_ms": 2000},
         "on_call": "query-primary", "repository": "tessera/services/query-engine",
         "depends_on": ["clickhouse-cluster"],
         "description": "Runs dashboard, funnel and retention queries against ClickHouse."},
        {"name": "billing-service", "owner": "finance engineering", "tier": 2,
         "slo": {"availability": "99.5%", "p95_latency_ms": 800},
         "on_call": "business-hours", "repository": "tessera/services/billing",
         "depends_on": ["stripe", "postgres-main"],
         "description": "Computes usage, issues invoices through Stripe and applies prorated refunds."},
        {"name": "auth-service", "owner": "identity team", "tier": 1,
         "slo": {"availability": "99.99%", "p95_latency_ms": 150},
         "on_call": "platform-primary", "repository": "tessera/services/auth",
         "depends_on": ["postgres-main", "redis-sessions"],
         "description": "Validates API keys, SSO (SAML and OIDC) and dashboard sessions."},
        {"name": "export-worker", "owner": "integrations team", "tier": 3,
         "slo": {"availability": "99%", "p95_latency_ms": None},
         "on_call": "business-hours", "repository": "tessera/services/export-worker",
         "depends_on": ["query-engine", "s3-exports"],
         "description": "Writes asynchronous CSV and Parquet exports to S3."},
    ],
}

SCRIPT_PY = '''\
"""Rotate a project's API key: create the new key, then revoke the old one after the grace period.

Usage: python rotate_api_keys.py PROJECT_ID [--grace-hours 24]
"""

import argparse
import time

from tessera_admin import Client  # internal admin SDK

GRACE_HOURS_DEFAULT = 24  # matches the API's documented grace period


def rotate(client: Client, project_id: str, grace_hours: int) -> str:
    """Create a new live key and schedule revocation of the current one."""
    old = client.api_keys.current(project_id)
    new = client.api_keys.create(project_id, prefix="tsk_live_")
    client.api_keys.schedule_revocation(old.id, after_s=grace_hours * 3600)
    client.audit.log("api_key_rotated", project=project_id, old=old.id, new=new.id)
    return new.secret


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("project_id")
    parser.add_argument("--grace-hours", type=int, default=GRACE_HOURS_DEFAULT)
    args = parser.parse_args()
    started = time.monotonic()
    secret = rotate(Client.from_env(), args.project_id, args.grace_hours)
    print(f"new key created in {time.monotonic() - started:.1f}s; store it now: {secret[:12]}...")


if __name__ == "__main__":
    main()
'''

RELEASE_NOTES_TXT = """\
Tessera release notes
=====================

Version 4.5 (2024-03-26)

Funnels can now be broken down by up to three properties at once. The funnel chart shows
conversion time as a distribution instead of a single median.

Fixed: the CSV export of large funnel reports no longer stops at 100,000 rows; exports of
any size are streamed to S3 and a download link is e-mailed when they are ready.

Version 4.4 (2024-02-27)

SAML single sign-on supports automatic user provisioning with SCIM 2.0 on the Business and
Enterprise plans. Removing a user in the identity provider deactivates them in Tessera
within five minutes.

Webhook signatures now use HMAC-SHA256 with a timestamp to prevent replay attacks. The old
SHA1 signatures are sent in parallel until 2024-06-30.

Version 4.3 (2024-01-30)

Dashboards load up to four times faster on projects with more than one billion events,
thanks to ClickHouse projections. Dashboard timezones now follow the project setting rather
than UTC.

Version 4.2 (2024-01-09)

New Python SDK 3.0 with automatic retries and batching (up to 500 events per request).
The SDK drops events only after 6 failed attempts over about 10 minutes, and logs each drop.
"""

FAQ_ZH_MD = """\
# Tessera 常见问题（FAQ）

本文档回答中国区客户最常提出的问题。如果这里没有你要找的答案，请在控制台右下角提交工单，
工作日内我们会在 4 小时内回复。

## 账号与登录

### 忘记密码怎么办？

在登录页点击“忘记密码”，系统会向注册邮箱发送重置链接，链接 30 分钟内有效。如果公司开启了
SSO 单点登录，请联系你们公司的 IT 管理员，Tessera 无法替你重置企业身份提供方的密码。

### 为什么必须开启多因素认证？

为了保护客户数据，所有管理员账号必须开启多因素认证（MFA），可以使用身份验证器应用或硬件
安全密钥。如果验证码总是提示错误，请先检查手机时间是否与网络时间同步。

## 计费与发票

### 中途升级套餐如何计费？

在账单周期中途升级时，我们按天计算差价：新套餐剩余天数的费用减去旧套餐剩余天数的费用，
差额会出现在下一张发票上。降级在当前账单周期结束时生效，不会退还已付费用。

### 可以开具增值税专用发票吗？

可以。请在“账单设置”中填写公司抬头、税号、开户行和账号，财务团队会在每月 5 日前开具上月
发票并寄送电子版。

## 数据与隐私

### 数据存储在哪里？

中国区以外的欧洲客户数据存储在爱尔兰（eu-west-1），其他客户的数据存储在美国俄亥俄
（us-east-2）。企业版客户可以申请私有化部署。

### 如何删除某个用户的全部数据？

调用 `DELETE /v2/users/{user_id}` 接口，或在控制台的“数据删除”页面提交请求。删除会在 30
天内完成，备份中的数据会在 35 天内清除。
"""

RUNBOOK_ZH_TXT = """\
Tessera 运维手册：数据库备份与恢复

一、适用范围

本手册适用于生产环境的 Postgres 主库（postgres-main）和 ClickHouse 集群。值班工程师在执行
恢复操作之前，必须先在 #incidents 频道通报，并指定一名同事复核每一步命令。

二、备份策略

Postgres 主库每天凌晨两点（UTC）做一次全量快照，每五分钟归档一次 WAL 日志，因此最多丢失
五分钟的数据。快照保留 35 天。ClickHouse 每天凌晨三点做一次增量备份，每周日做一次全量备份，
备份文件存放在单独账号的 S3 存储桶中，并开启了对象锁定，任何人都无法提前删除。

三、恢复步骤

1. 在 AWS Backup 控制台找到需要的恢复点，记录恢复点编号。
2. 恢复到一个新的数据库实例，不要覆盖现有实例。
3. 用 tessera db verify 命令检查表数量和最近一小时的数据行数。
4. 确认无误后，切换服务的数据库连接串，并观察错误率十五分钟。

四、演练

每个季度的第一个星期二做一次恢复演练，目标是四十五分钟内完成 Postgres 恢复。上次演练在
2024 年 1 月 9 日，实际用时三十八分钟。
"""


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "sample")
