#!/usr/bin/env python3
"""Static checks of terraform/ and the Dockerfile, runnable with no cloud account and no Terraform
(a terraform binary on the PATH is used, if present, only to cross-check).

    python3 terraform/check.py [--headroom PATH]

One line per check; on failure the line names the file and the fix, and the exit code is 1.
Tools come from PyPI at pinned versions into venvs under ~/.cache/headroom/ (python-hcl2 and
checkov each ship a module named `hcl2`, so they cannot share one).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HCL2_PIN = "python-hcl2==8.1.4"
CHECKOV_PIN = "checkov==3.3.30"

TF = Path(__file__).resolve().parent
ROOT = TF.parent
CACHE = Path(os.environ.get("HEADROOM_TOOLS_CACHE", Path.home() / ".cache" / "headroom"))
AWS_ACTIONS = ROOT / "crates/headroom-aws/iam-actions.txt"
GCP_PERMISSIONS = ROOT / "crates/headroom-gcp/iam-permissions.txt"


def venv(name, requirement):
    """A venv holding exactly `requirement`, created on first use; returns its bin directory."""
    path = CACHE / name
    stamp = path / "headroom-requirement"
    bin_dir = path / "bin"
    if stamp.exists() and stamp.read_text() == requirement:
        return bin_dir
    shutil.rmtree(path, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run(
            [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
            check=True,
        )
    except subprocess.CalledProcessError:
        sys.exit(f"terraform/check.py: cannot install {requirement} into {path}; it needs python3-venv and PyPI")
    stamp.write_text(requirement)
    return bin_dir


class Fail(Exception):
    """A check failed; the message names the file and the fix."""


def rel(path):
    return os.path.relpath(path, ROOT)


# --- HCL helpers (python-hcl2 8 keeps string quotes and wraps expressions in ${...}) ---


def tf_files():
    return sorted(p for p in TF.rglob("*.tf") if ".terraform" not in p.parts)


def load_hcl(path):
    import hcl2

    with open(path) as f:
        return hcl2.load(f)


def unquote(value):
    """Literal HCL values as Python values; expressions stay strings starting with ${."""
    if isinstance(value, str):
        if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            return json.loads(value)
        return value
    if isinstance(value, list):
        return [unquote(v) for v in value]
    if isinstance(value, dict):
        return {unquote(k) if k.startswith('"') else k: unquote(v) for k, v in value.items() if k != "__is_block__"}
    return value


def blocks(doc, kind):
    """(label(s), body) for each block of a kind: variable, locals, resource, ..."""
    for block in doc.get(kind, []):
        if kind == "locals":
            yield (), block
            continue
        for label, body in block.items():
            if kind in ("resource", "data") and isinstance(body, dict):
                for name, inner in body.items():
                    if name != "__is_block__":
                        yield (unquote(label), unquote(name)), inner
            else:
                yield (unquote(label),), body


def module_locals(module_dir):
    merged = {}
    for path in sorted(module_dir.glob("*.tf")):
        for _, body in blocks(load_hcl(path), "locals"):
            merged.update(body)
    return merged


def module_resources(module_dir, rtype):
    found = {}
    for path in sorted(module_dir.glob("*.tf")):
        for labels, body in blocks(load_hcl(path), "resource"):
            if labels[0] == rtype:
                found[labels[1]] = body
    return found


def all_blocks(kind="resource"):
    """(path, type, name, body) of every resource (or data) block under terraform/."""
    for path in tf_files():
        for labels, body in blocks(load_hcl(path), kind):
            yield path, labels[0], labels[1], body


def module_calls(directory):
    """name -> body (values as unquote() gives them) of every module block in a directory."""
    calls = {}
    for path in sorted(directory.glob("*.tf")):
        for (name,), body in blocks(load_hcl(path), "module"):
            calls[name] = unquote(body)
    return calls


def terraform_console(directory, expr):
    """`terraform console` in a directory holding only locals and variables (no provider)."""
    proc = subprocess.run(["terraform", "console"], input=expr + "\n", capture_output=True, text=True, cwd=directory,
                          env=dict(os.environ, CHECKPOINT_DISABLE="1", TF_CLI_CONFIG_FILE="/dev/null"), timeout=120)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def first_locals_block(text):
    start = text.index("locals {")
    return text[start:text.index("\n}\n", start) + 3]


def read_list(path):
    """The provider's list of cloud permissions, as the module reads it; (lines, path, note)."""
    if not path.exists():
        raise Fail(f"{rel(path)} is missing; it is the provider's list of cloud permissions the Terraform grants")
    lines = [s for s in (line.strip() for line in path.read_text().splitlines()) if s and not s.startswith("#")]
    return lines, path, ""


# --- the checks ---


def check_parse():
    files = tf_files() + sorted(TF.rglob("*.tfvars"))
    for path in files:
        try:
            load_hcl(path)
        except Exception as e:  # the parser raises several exception types
            raise Fail(f"{rel(path)} does not parse as HCL: {str(e).splitlines()[0]}; fix the syntax")
    return f"{len(files)} .tf/.tfvars files parse (python-hcl2)"


def check_variables():
    count = 0
    for path in tf_files():
        for (name,), body in blocks(load_hcl(path), "variable"):
            count += 1
            missing = [k for k in ("type", "description") if not unquote(body.get(k, ""))]
            if missing:
                raise Fail(f"{rel(path)}: variable \"{name}\" has no {' or '.join(missing)}; add them to its block")
    return f"{count} variables, each with a type and a description"


SKIP = re.compile(r"#\s*checkov:skip=([A-Z0-9_]+)(?::(.*))?")


def check_checkov(checkov_bin):
    skips = 0
    for path in tf_files() + [ROOT / "Dockerfile"]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = SKIP.search(line)
            if not m:
                continue
            skips += 1
            reason = (m.group(2) or "").strip()
            if len(reason) < 15:
                raise Fail(f"{rel(path)}:{n}: checkov skip of {m.group(1)} without a reason; write `#checkov:skip={m.group(1)}:<why this is safe>`")
    for config in (ROOT / ".checkov.yaml", ROOT / ".checkov.yml", TF / ".checkov.yaml", TF / ".checkov.yml"):
        if config.exists():
            raise Fail(f"{rel(config)}: checks are skipped inline with a reason, not in a config file; remove it")
    # Offline, checkov knows no severities (they come from the Prisma Cloud API), so every
    # failed check fails this one; a finding that is accepted is skipped inline with a reason.
    env = dict(os.environ, BC_SKIP_MAPPING="TRUE", LOG_LEVEL="WARNING")
    failed, passed, skipped, parse_errors = [], 0, 0, 0
    for target, framework in ((["--directory", str(TF)], "terraform"), (["--file", str(ROOT / "Dockerfile")], "dockerfile")):
        proc = subprocess.run(
            [str(checkov_bin), *target, "--framework", framework, "--output", "json",
             "--quiet", "--compact", "--skip-download"],
            capture_output=True, text=True, env=env, cwd=TF,
        )
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise Fail(f"checkov ({framework}) did not produce a report (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
        for r in report if isinstance(report, list) else [report]:
            failed += r.get("results", {}).get("failed_checks", [])
            summary = r.get("summary", {})
            passed += summary.get("passed", 0)
            skipped += summary.get("skipped", 0)
            parse_errors += summary.get("parsing_errors", 0)
    if parse_errors:
        raise Fail(f"checkov could not parse {parse_errors} file(s); run checkov -d terraform (or -f Dockerfile) without --quiet to see which")
    if failed:
        lines = sorted({f"{c['check_id']} {c['resource']} ({c['file_path'].lstrip('/')}:{c['file_line_range'][0]}): {c['check_name']}" for c in failed})
        raise Fail(
            f"checkov: {len(lines)} failed check(s); fix each, or add `#checkov:skip=<ID>:<reason>` in the resource:\n      "
            + "\n      ".join(lines)
        )
    if passed == 0:
        raise Fail("checkov passed no check at all; it did not scan terraform/")
    return f"checkov (terraform/ and Dockerfile): {passed} passed, 0 failed, {skipped} skipped ({skips} inline skips, each with a reason)"


ACTION = re.compile(r"^[a-z0-9-]+:[A-Za-z0-9]+$")
READ = re.compile(r"^[a-z0-9-]+:(Describe|Get|List)[A-Za-z0-9]*$")
# Classes whose statements must be scoped, and the conditions that scope them: a tag condition
# on this cluster's id, or (tagging) ec2:CreateAction, i.e. only inside a launch, which is itself
# conditioned on the cluster tag.
CONDITIONED = {
    "owned_instances": ("aws:ResourceTag/",),
    "owned_asgs": ("aws:ResourceTag/",),
    "tag": ("aws:ResourceTag/", "ec2:CreateAction"),
}


def scoped(stmt, keys):
    if "ec2:CreateAction" in keys and re.search(r'"ec2:CreateAction" = \[?"', stmt):
        return True
    return "var.cluster_id" in stmt and any(k in stmt and k != "ec2:CreateAction" for k in keys)


def statements(expr):
    """Split the provider_statements expression into one string per statement object."""
    parts = re.split(r"(?=\{Sid = )", expr)
    return [p for p in parts if p.startswith("{Sid = ")]


def check_aws_iam():
    module = TF / "modules/aws"
    iam_tf = module / "iam.tf"
    actions, source_file, note = read_list(AWS_ACTIONS)
    bad = [a for a in actions if not ACTION.match(a)]
    if bad:
        raise Fail(f"{rel(source_file)}: {bad[0]!r} is not an IAM action like ec2:RunInstances")
    loc = module_locals(module)
    if "file(local.actions_file)" not in loc.get("provider_actions", "") or "crates/headroom-aws/iam-actions.txt" not in loc.get("actions_file", ""):
        raise Fail(f"{rel(iam_tf)}: local.provider_actions must read crates/headroom-aws/iam-actions.txt (local.actions_file) with file(); the policy's actions come from that list only")
    if not isinstance(loc.get("action_classes"), dict):
        raise Fail(f"{rel(iam_tf)}: local.action_classes must be a literal map of class => [actions]")
    classes = unquote(loc["action_classes"])
    owner = {}
    for cls, listed in classes.items():
        for a in listed:
            if a in owner:
                raise Fail(f"{rel(iam_tf)}: {a} is in action_classes {owner[a]!r} and {cls!r}; keep it in one")
            owner[a] = cls
    bad_read = [a for a in classes.get("read", []) if not READ.match(a)]
    if bad_read:
        raise Fail(f"{rel(iam_tf)}: {bad_read[0]} is in class 'read' (Resource \"*\") but is not a Describe/Get/List call; move it to a scoped class")
    unplaced = [a for a in actions if a not in owner]
    if unplaced:
        raise Fail(f"{rel(source_file)} names {', '.join(unplaced)}, which no statement grants; add each to the right list in local.action_classes ({rel(iam_tf)})")
    granted = {cls: sorted(a for a in actions if owner[a] == cls) for cls in classes}

    stmts = statements(loc.get("provider_statements", ""))
    if not stmts:
        raise Fail(f"{rel(iam_tf)}: local.provider_statements has no statement objects")
    used = set()
    for s in stmts:
        sid = re.match(r'\{Sid = "([^"]+)"', s).group(1)
        refs = re.findall(r"Action = ([^,}]+)", s)
        if len(refs) != 1 or not re.fullmatch(r'local\.granted\["[a-z_]+"\]', refs[0].strip()):
            raise Fail(f"{rel(iam_tf)}: statement {sid}: Action must be local.granted[\"<class>\"], never a literal list, so it can only hold actions from {rel(AWS_ACTIONS)}")
        cls = re.search(r'"([a-z_]+)"', refs[0]).group(1)
        if cls not in classes:
            raise Fail(f"{rel(iam_tf)}: statement {sid} uses class {cls!r}, which local.action_classes lacks")
        used.add(cls)
        if 'Resource = "*"' in s and cls != "read":
            raise Fail(f"{rel(iam_tf)}: statement {sid} grants class {cls!r} on Resource \"*\"; only the read class may")
        if cls in CONDITIONED:
            if not scoped(s, CONDITIONED[cls]):
                raise Fail(f"{rel(iam_tf)}: statement {sid} must be conditioned on the cluster tag ({' or '.join(CONDITIONED[cls])}); add the Condition")
        if cls == "launch" and ":instance/" in s and not ("aws:RequestTag/" in s and "var.cluster_id" in s):
            raise Fail(f"{rel(iam_tf)}: statement {sid} lets launches create instances without the cluster tag; condition it on aws:RequestTag/headroom-cluster")
    missing = [cls for cls in granted if granted[cls] and cls not in used]
    if missing:
        raise Fail(f"{rel(iam_tf)}: class {missing[0]!r} holds {granted[missing[0]]} but no statement uses it; add a statement")
    if unquote(loc.get("cluster_tag")) != "headroom-cluster" or '"headroom-cluster"' not in (ROOT / "crates/headroom-cloud/src/provider.rs").read_text():
        raise Fail(f"{rel(iam_tf)}: local.cluster_tag must be the ownership tag the providers set (headroom-cluster, crates/headroom-cloud/src/provider.rs)")
    policy = module_resources(module, "aws_iam_role_policy").get("provider", {})
    if "local.provider_statements" not in str(policy.get("policy", "")) or "local.unclassified_actions" not in json.dumps(policy):
        raise Fail(f"{rel(iam_tf)}: aws_iam_role_policy.provider must use local.provider_statements and keep its precondition on local.unclassified_actions")
    summary = ", ".join(f"{cls} {len(v)}" for cls, v in granted.items() if v)
    via = "terraform not installed: policy not evaluated"
    if shutil.which("terraform"):
        evaluated = terraform_policy(iam_tf, source_file)
        union = {a for s in evaluated for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
        if union != set(actions):
            raise Fail(f"{rel(iam_tf)}: the policy Terraform computes grants {sorted(union ^ set(actions))} differently from {rel(source_file)}; make every statement's Action local.granted[...]")
        via = f"Terraform evaluated the policy: {len(evaluated)} statements, actions == the list"
    return f"AWS policy = the {len(actions)} actions of {rel(source_file)}{note}, tag-conditioned where AWS allows ({summary}; {via})"


def terraform_policy(iam_tf, source_file):
    """The provider policy's statements as Terraform computes them, from iam.tf's locals alone
    (data sources replaced by placeholders), in a copy of the repository layout."""
    block = first_locals_block(iam_tf.read_text())
    block = block.replace("data.aws_caller_identity.current.account_id", '"123456789012"')
    block = block.replace("data.aws_partition.current.partition", '"aws"')
    defaults = {}
    for (name,), body in blocks(load_hcl(iam_tf.parent / "variables.tf"), "variable"):
        defaults[name] = unquote(body["default"]) if "default" in body else "check-cluster"
    used = sorted(set(re.findall(r"var\.(\w+)", block)))
    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp, rel(iam_tf.parent))
        module.mkdir(parents=True)
        copy = Path(tmp, rel(source_file))
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source_file, copy)
        decls = "".join(f'variable "{v}" {{\n  default = {json.dumps(defaults[v])}\n}}\n' for v in used)
        (module / "main.tf").write_text(block + decls)
        code, out, err = terraform_console(module, "jsonencode(local.provider_statements)")
        if code != 0:
            raise Fail(f"{rel(iam_tf)}: terraform console cannot evaluate local.provider_statements: {err[-300:]}")
        return json.loads(json.loads(out))


PERMISSION = re.compile(r"^[a-z]+\.[A-Za-z]+\.[A-Za-z]+$")
GCP_ACCESS = TF / "modules/gcp-compute-access"
# Who holds the GCP provider's role: each goes through modules/gcp-compute-access, the one place
# the custom role is defined.
GCP_ACCESS_USERS = {TF / "modules/gcp": "../gcp-compute-access", TF / "examples/multicloud": "../../modules/gcp-compute-access"}
ALLOWED_PROJECT_ROLES = {"${google_project_iam_custom_role.provider.id}", "roles/cloudsql.client"}
# Grants above a service account or resource: each names a role for a whole project, folder or
# organisation (the *_policy forms replace the whole policy).
WIDE_IAM = re.compile(r"^google_(project|folder|organization)_iam_(member|binding|policy)$")


def check_gcp_iam():
    iam_tf = GCP_ACCESS / "iam.tf"
    perms, source_file, note = read_list(GCP_PERMISSIONS)
    bad = [p for p in perms if not PERMISSION.match(p)]
    if bad:
        raise Fail(f"{rel(source_file)}: {bad[0]!r} is not a permission like compute.instances.create")
    if "iam.serviceAccounts.actAs" in perms:
        raise Fail(f"{rel(source_file)}: iam.serviceAccounts.actAs project-wide lets the service act as any account; remove it and set node_service_account_email")
    loc = module_locals(GCP_ACCESS)
    if "file(local.permissions_file)" not in loc.get("provider_permissions", "") or "crates/headroom-gcp/iam-permissions.txt" not in loc.get("permissions_file", ""):
        raise Fail(f"{rel(iam_tf)}: local.provider_permissions must read crates/headroom-gcp/iam-permissions.txt (local.permissions_file) with file()")
    roles = [(path, name, body) for path, rtype, name, body in all_blocks() if rtype == "google_project_iam_custom_role"]
    if len(roles) != 1 or roles[0][0].parent != GCP_ACCESS or unquote(roles[0][2].get("permissions")) != "${local.provider_permissions}":
        where = ", ".join(f"{rel(p)} ({n})" for p, n, _ in roles) or "none"
        raise Fail(f"exactly one custom role, in {rel(iam_tf)}, with permissions = local.provider_permissions (no literal list); found: {where}")
    for user, source in GCP_ACCESS_USERS.items():
        if not any(call.get("source") == source for call in module_calls(user).values()):
            raise Fail(f"{rel(user)}: give the service its GCP permissions through module \"{source}\" (the one custom role), not a role of its own")
    for path, rtype, name, body in all_blocks():
        if not WIDE_IAM.match(rtype):
            continue
        role = unquote(body.get("role"))
        if rtype.endswith("_policy") or not rtype.startswith("google_project_") or role not in ALLOWED_PROJECT_ROLES or (
            role.startswith("${google_project_iam_custom_role") and path.parent != GCP_ACCESS
        ):
            raise Fail(f"{rel(path)}: {rtype}.{name} grants {role or 'a whole policy'} above a single resource; the service gets its custom role (modules/gcp-compute-access) and roles/cloudsql.client project-wide, nothing else")
    return (f"GCP custom role = the {len(perms)} permissions of {rel(source_file)}{note}, defined once ({rel(GCP_ACCESS)}, used by "
            + " and ".join(rel(u) for u in GCP_ACCESS_USERS) + "); project roles: custom role, cloudsql.client")


# --- multicloud: the AWS control plane acting as a GCP service account, with no key ---

WIF_USER = "roles/iam.workloadIdentityUser"
MULTICLOUD = TF / "examples/multicloud"


def check_multicloud_wif():
    fed_tf = GCP_ACCESS / "federation.tf"
    main_tf = MULTICLOUD / "main.tf"
    # The example: the GCP module trusts the AWS module's task role, and the task gets the
    # credential configuration the GCP module renders.
    calls = module_calls(MULTICLOUD)
    aws = [n for n, c in calls.items() if c.get("source") == "../../modules/aws"]
    gcp = [n for n, c in calls.items() if c.get("source") == GCP_ACCESS_USERS[MULTICLOUD]]
    if len(aws) != 1 or len(gcp) != 1:
        raise Fail(f"{rel(main_tf)}: one module from ../../modules/aws (the control plane) and one from ../../modules/gcp-compute-access")
    aws, gcp = aws[0], gcp[0]
    if calls[gcp].get("aws_role_arn") != f"${{module.{aws}.task_role_arn}}":
        raise Fail(f"{rel(main_tf)}: module.{gcp}: set aws_role_arn = module.{aws}.task_role_arn, so federation admits the service's task role and nothing else")
    if calls[aws].get("google_credential_config") != f"${{module.{gcp}.credential_config}}":
        raise Fail(f"{rel(main_tf)}: module.{aws}: set google_credential_config = module.{gcp}.credential_config, so the task reaches GCP through federation")
    outputs = {name: unquote(body.get("value")) for path in (TF / "modules/aws").glob("*.tf") for (name,), body in blocks(load_hcl(path), "output")}
    if outputs.get("task_role_arn") != "${aws_iam_role.task.arn}":
        raise Fail("terraform/modules/aws: output task_role_arn must be aws_iam_role.task.arn, the role the service runs as")

    # The provider: AWS only, and its condition admits exactly the assumed-role ARN of that role.
    providers = module_resources(GCP_ACCESS, "google_iam_workload_identity_pool_provider")
    if len(providers) != 1:
        raise Fail(f"{rel(fed_tf)}: exactly one workload identity pool provider (the AWS one)")
    (pname, provider), = providers.items()
    if "aws" not in provider or any(k in provider for k in ("oidc", "saml", "x509")):
        raise Fail(f"{rel(fed_tf)}: google_iam_workload_identity_pool_provider.{pname} must be an AWS provider (an aws block, no oidc/saml/x509)")
    condition = unquote(provider.get("attribute_condition", ""))
    if not re.fullmatch(r"attribute\.aws_role == '\$\{local\.aws_assumed_role\}'", condition):
        raise Fail(f"{rel(fed_tf)}: google_iam_workload_identity_pool_provider.{pname}: attribute_condition is {condition!r}; "
                   "write attribute_condition = \"attribute.aws_role == '${local.aws_assumed_role}'\" so only the task role's sessions are exchanged")
    mapping = unquote(provider.get("attribute_mapping", {}))
    if "assumed-role" not in mapping.get("attribute.aws_role", "") or mapping.get("google.subject") != "assertion.arn":
        raise Fail(f"{rel(fed_tf)}: google_iam_workload_identity_pool_provider.{pname}: map google.subject = assertion.arn and attribute.aws_role to the assumed-role ARN (GCP's default AWS mapping)")
    loc = module_locals(GCP_ACCESS)
    if "var.aws_role_arn" not in loc.get("aws_role", "") or ":sts::" not in loc.get("aws_assumed_role", "") or "assumed-role/${local.aws_role.name}" not in loc.get("aws_assumed_role", ""):
        raise Fail(f"{rel(fed_tf)}: local.aws_assumed_role must be arn:PARTITION:sts::ACCOUNT:assumed-role/NAME derived from var.aws_role_arn")
    via = "terraform not installed: the ARN derivation not evaluated"
    if shutil.which("terraform"):
        sample = "arn:aws:iam::123456789012:role/headroom-task"
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "main.tf").write_text(first_locals_block(fed_tf.read_text()) + f'variable "aws_role_arn" {{\n  default = "{sample}"\n}}\n')
            code, out, err = terraform_console(tmp, "local.aws_assumed_role")
        if code != 0 or out != '"arn:aws:sts::123456789012:assumed-role/headroom-task"':
            raise Fail(f"{rel(fed_tf)}: for {sample} Terraform computes local.aws_assumed_role = {out or err[-200:]}; it must be arn:aws:sts::123456789012:assumed-role/headroom-task")
        via = "Terraform evaluated the assumed-role ARN"

    # Impersonation: granted on a service account, to that pool's principalSet for the role;
    # never above the account (project, folder, organisation, or in a policy document).
    member = re.compile(r"principalSet://iam\.googleapis\.com/\$\{google_iam_workload_identity_pool\.\w+(\[0\])?\.name\}/attribute\.aws_role/\$\{local\.aws_assumed_role\}")
    grants = 0
    for kind in ("resource", "data"):
        for path, rtype, name, body in all_blocks(kind):
            if rtype == "google_service_account_key":
                raise Fail(f"{rel(path)}: {kind} google_service_account_key.{name}: no service account key anywhere; the AWS side federates instead")
            if WIF_USER not in json.dumps(body):
                continue
            if kind != "resource" or rtype != "google_service_account_iam_member":
                raise Fail(f"{rel(path)}: {rtype}.{name} grants {WIF_USER} there; grant it only with google_service_account_iam_member on the one service account")
            if path.parent != GCP_ACCESS or not re.fullmatch(r"\$\{google_service_account\.\w+\.name\}", unquote(body.get("service_account_id", ""))):
                raise Fail(f"{rel(path)}: google_service_account_iam_member.{name}: {WIF_USER} belongs on the provider's service account in {rel(GCP_ACCESS)} (service_account_id = google_service_account.<name>.name)")
            if not member.fullmatch(unquote(body.get("member", ""))):
                raise Fail(f"{rel(path)}: google_service_account_iam_member.{name}: member must be principalSet://iam.googleapis.com/${{google_iam_workload_identity_pool.<pool>.name}}/attribute.aws_role/${{local.aws_assumed_role}}, "
                           f"not {unquote(body.get('member'))!r}")
            grants += 1
    if grants != 1:
        raise Fail(f"{rel(fed_tf)}: exactly one {WIF_USER} grant (found {grants}), on the provider's service account")

    # The credential configuration: external_account from AWS, impersonating that account.
    config = loc.get("credential_config", "")
    for needle in ('type = "external_account"', 'subject_token_type = "urn:ietf:params:aws:token-type:aws4_request"',
                   'environment_id = "aws1"', "regional_cred_verification_url = ", "iam.googleapis.com/${google_iam_workload_identity_pool_provider.",
                   "serviceAccounts/${google_service_account.this.email}:generateAccessToken"):
        if needle not in config:
            raise Fail(f"{rel(fed_tf)}: local.credential_config lacks {needle!r}; it is the external_account file of an AWS source that impersonates the provider's account")

    # The AWS side gains nothing: the task role's only policy is the provider's.
    for path, rtype, name, body in all_blocks():
        if rtype in ("aws_iam_role_policy", "aws_iam_role_policy_attachment", "aws_iam_policy_attachment", "aws_iam_role_policies_exclusive", "aws_iam_role_policy_attachments_exclusive"):
            if "aws_iam_role.task." in json.dumps(body) and (rtype, name, path.parent) != ("aws_iam_role_policy", "provider", TF / "modules/aws"):
                raise Fail(f"{rel(path)}: {rtype}.{name} adds to the task role; federation needs no AWS permission (sts:GetCallerIdentity needs none), and the role holds only the provider's policy")
    return (f"module.{gcp} federates module.{aws}'s task role only (attribute_condition on its assumed-role ARN; {via}); {WIF_USER} on the service account "
            "alone, to that pool's principalSet; the task role's only policy is the provider's; no service account key under terraform/")


# --- the configuration template: a renderer for the subset of Terraform templates used ---

TEMPLATE_TOKEN = re.compile(r"\$\{([^}]*)\}|%\{([^}]*)\}")


class TemplateError(Exception):
    pass


def parse_template(text):
    """Nodes: ("text", s) | ("expr", e) | ("for", var, e, body). Strip markers applied here."""
    root, stack, pos, strip_next = [], [], 0, False
    current = root

    def add_text(s):
        nonlocal strip_next
        if strip_next and s:
            # Terraform's `~}` trims the whitespace up to and including the next newline.
            head, nl, tail = s.partition("\n")
            s = (head + nl).lstrip() + tail
        strip_next = False
        if s:
            current.append(("text", s))

    for m in TEMPLATE_TOKEN.finditer(text):
        literal = text[pos:m.start()]
        if "$${" in text[pos:m.end()] or "%%{" in text[pos:m.end()]:
            raise TemplateError("escapes ($${, %%{) are not supported by the check's renderer")
        add_text(literal)
        pos = m.end()
        if m.group(1) is not None:
            expr = m.group(1)
            if "~" in expr:
                raise TemplateError("strip markers are supported on %{ } directives only")
            current.append(("expr", expr.strip()))
            strip_next = False
            continue
        directive = m.group(2)
        if directive.startswith("~"):
            raise TemplateError("left strip markers (%{~) are not supported by the check's renderer; use `~}` only")
        strip = directive.rstrip().endswith("~")
        body = directive.strip().rstrip("~").strip()
        loop = re.fullmatch(r"for (\w+) in ([\w.]+)", body)
        if loop:
            node = ("for", loop.group(1), loop.group(2), [])
            current.append(node)
            stack.append(current)
            current = node[3]
        elif body == "endfor":
            if not stack:
                raise TemplateError("endfor without for")
            current = stack.pop()
        else:
            raise TemplateError(f"directive %{{{directive}}} is not supported; use only `for X in NAME` / `endfor`")
        strip_next = strip
    add_text(text[pos:])
    if stack:
        raise TemplateError("for without endfor")
    return root


def lookup(path, scope):
    parts = path.split(".")
    if parts[0] not in scope:
        raise TemplateError(f"{parts[0]!r} is not a template variable")
    value = scope[parts[0]]
    for p in parts[1:]:
        if not isinstance(value, dict) or p not in value:
            raise TemplateError(f"{path}: no attribute {p!r}")
        value = value[p]
    return value


def tf_string(value):
    """How Terraform turns a primitive into text inside ${}."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TemplateError(f"cannot interpolate a {type(value).__name__} ({value!r}); use jsonencode()")


def tf_jsonencode(value):
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    # Go's encoder (Terraform's) escapes these for HTML safety.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def evaluate(expr, scope):
    m = re.fullmatch(r"jsonencode\(([\w.]+)\)", expr)
    if m:
        return tf_jsonencode(lookup(m.group(1), scope))
    if re.fullmatch(r"[\w.]+", expr):
        return tf_string(lookup(expr, scope))
    raise TemplateError(f"${{{expr}}}: only NAME, NAME.ATTR and jsonencode(NAME.ATTR) are supported")


def render(nodes, scope):
    out = []
    for node in nodes:
        if node[0] == "text":
            out.append(node[1])
        elif node[0] == "expr":
            out.append(evaluate(node[1], scope))
        else:
            _, var, expr, body = node
            items = lookup(expr, scope)
            if not isinstance(items, list):
                raise TemplateError(f"for {var} in {expr}: not a list")
            for item in items:
                out.append(render(body, dict(scope, **{var: item})))
    return "".join(out)


def example_inputs(example):
    """The templatefile() arguments (each `name = var.name`) and the variables' defaults."""
    main_tf = example / "main.tf"
    text = main_tf.read_text()
    m = re.search(r'templatefile\("\$\{path\.module\}/headroom\.toml\.tftpl",\s*\{(.*?)\}\)', text, re.S)
    if not m:
        raise Fail(f"{rel(main_tf)}: render the configuration with templatefile(\"${{path.module}}/headroom.toml.tftpl\", {{ name = var.name, ... }})")
    args = {}
    for line in m.group(1).strip().splitlines():
        a = re.fullmatch(r"\s*(\w+)\s*=\s*var\.(\w+)\s*", line)
        if not a or a.group(1) != a.group(2):
            raise Fail(f"{rel(main_tf)}: templatefile argument {line.strip()!r}: write each as `name = var.name` so the check can render the template")
        args[a.group(1)] = a.group(2)
    defaults, types = {}, {}
    for (name,), body in blocks(load_hcl(example / "variables.tf"), "variable"):
        types[name] = re.sub(r"^\$\{(.*)\}$", r"\1", str(body.get("type", "any")), flags=re.S)
        if "default" in body:
            defaults[name] = unquote(body["default"])
    return args, defaults, types


def terraform_render(example, scope, types):
    """The same template through Terraform itself, when a terraform binary happens to be around;
    the variables keep their declared types, so Terraform's conversions show up as differences."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "vars.auto.tfvars.json").write_text(json.dumps(scope))
        Path(tmp, "main.tf").write_text("".join(f'variable "{k}" {{\n  type = {types[k]}\n}}\n' for k in scope))
        call = ", ".join(f"{k} = var.{k}" for k in scope)
        expr = f'jsonencode(templatefile("{example}/headroom.toml.tftpl", {{ {call} }}))\n'
        proc = subprocess.run(["terraform", "console"], input=expr, capture_output=True, text=True, cwd=tmp,
                              env=dict(os.environ, CHECKPOINT_DISABLE="1", TF_CLI_CONFIG_FILE="/dev/null"), timeout=120)
        if proc.returncode != 0:
            raise Fail(f"terraform console failed on {rel(example)}/headroom.toml.tftpl: {proc.stderr.strip()[-300:]}")
        return json.loads(json.loads(proc.stdout.strip()))


def check_configs(headroom_cmd):
    results = []
    for example in sorted(p for p in (TF / "examples").iterdir() if (p / "headroom.toml.tftpl").exists()):
        args, defaults, types = example_inputs(example)
        template = example / "headroom.toml.tftpl"
        try:
            nodes = parse_template(template.read_text())
        except TemplateError as e:
            raise Fail(f"{rel(template)}: {e}")
        # The defaults alone when they cover every template input, then check.tfvars on top.
        variants = [("defaults", {})] if all(v in defaults for v in args.values()) else []
        fixture = example / "check.tfvars"
        if fixture.exists():
            variants.append(("check.tfvars", {k: unquote(v) for k, v in load_hcl(fixture).items()}))
        for label, overrides in variants:
            values = dict(defaults, **overrides)
            missing = [v for v in args.values() if v not in values]
            if missing:
                raise Fail(f"{rel(example)}: variable {missing[0]!r} feeds the configuration template but has no default; give it one or set it in check.tfvars")
            scope = {k: values[v] for k, v in args.items()}
            try:
                text = render(nodes, scope)
            except TemplateError as e:
                raise Fail(f"{rel(template)} ({label}): {e}")
            if shutil.which("terraform"):
                expected = terraform_render(example, scope, {k: types[v] for k, v in args.items()})
                if expected != text:
                    raise Fail(f"{rel(template)} ({label}): the check's renderer and Terraform disagree; keep the template to the supported subset (see check.py) and defaults to their declared types (Terraform converts, e.g. \"08\" to 8)")
            with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix=f"{example.name}-", delete=False) as f:
                f.write(text)
            proc = subprocess.run(headroom_cmd + ["config", "check", f.name], capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise Fail(
                    f"{rel(template)} rendered with the {label} gives a configuration `headroom config check` rejects (kept in {f.name}); "
                    f"fix the template or the variables:\n      " + "\n      ".join((proc.stderr or proc.stdout).strip().splitlines())
                )
            os.unlink(f.name)
            results.append(f"{example.name}/{label}: {proc.stdout.strip().split(': ', 1)[-1]}")
        if not variants:
            raise Fail(f"{rel(example)}: some template inputs have no default; add a check.tfvars that sets them")
    if not results:
        raise Fail("no terraform/examples/*/headroom.toml.tftpl found")
    via = "renderer = Terraform's output" if shutil.which("terraform") else "terraform not installed: renderer not cross-checked"
    return "rendered configurations pass `headroom config check`: " + "; ".join(results) + f" ({via})"


def check_dockerfile():
    path = ROOT / "Dockerfile"
    if not path.exists():
        raise Fail("Dockerfile is missing at the repository root")
    # Instructions, with continuation lines joined.
    text = re.sub(r"\\\n", " ", "\n".join(l for l in path.read_text().splitlines() if not l.strip().startswith("#")))
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    froms = [i for i, l in enumerate(lines) if l.upper().startswith("FROM ")]
    if len(froms) < 2:
        raise Fail("Dockerfile: build in one stage and copy the binary into a slim runtime stage (multi-stage)")
    final = lines[froms[-1]:]
    users = [l.split(None, 1)[1] for l in final if l.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        raise Fail("Dockerfile: the runtime stage must end with a non-root USER")
    for needle, fix in (
        ("migrations", "COPY the migrations/ directory into the runtime stage"),
        ("headroom.example.toml", "COPY config/headroom.example.toml as the default configuration"),
        ("EXPOSE 8080", "EXPOSE 8080"),
        ("--locked", "build with cargo build --release --locked"),
    ):
        if not any(needle in l for l in (final if needle != "--locked" else lines)):
            raise Fail(f"Dockerfile: {fix}")
    if not any(l.upper().startswith("HEALTHCHECK") and "/readyz" in l for l in final):
        raise Fail("Dockerfile: add a HEALTHCHECK that asks GET /readyz in the runtime stage")
    ignore = ROOT / ".dockerignore"
    if not ignore.exists() or "target" not in ignore.read_text():
        raise Fail(".dockerignore: exclude target/ (and .git) from the build context")
    return f"Dockerfile: {len(froms)} stages, runtime user {users[-1]}, migrations + default config copied"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", help="headroom binary for `config check` (default: cargo run)")
    opts = parser.parse_args()

    if os.environ.get("HEADROOM_CHECK_VENV") != "1":
        bin_dir = venv("venv-python-hcl2", HCL2_PIN)
        os.environ["HEADROOM_CHECK_VENV"] = "1"
        os.execv(str(bin_dir / "python"), [str(bin_dir / "python"), __file__] + sys.argv[1:])

    headroom_cmd = [opts.headroom] if opts.headroom else ["cargo", "run", "--quiet", "--locked", "--"]
    checks = [
        ("parse", check_parse),
        ("variables", check_variables),
        ("aws-iam", check_aws_iam),
        ("gcp-iam", check_gcp_iam),
        ("multicloud-wif", check_multicloud_wif),
        ("configs", lambda: check_configs(headroom_cmd)),
        ("dockerfile", check_dockerfile),
        ("checkov", lambda: check_checkov(venv("venv-checkov", CHECKOV_PIN) / "checkov")),
    ]
    failed = 0
    for name, check in checks:
        try:
            print(f"ok   {name}: {check()}", flush=True)
        except Fail as e:
            failed += 1
            print(f"FAIL {name}: {e}", flush=True)
        except Exception as e:  # e.g. a file that does not parse, already reported by `parse`
            failed += 1
            print(f"FAIL {name}: could not run ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})", flush=True)
    if failed:
        print(f"terraform/check.py: {failed} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
