"""A locked-down local Kafka for passk: TLS from a local CA (made with the JDK's keytool,
nothing fetched), SCRAM-SHA-512 users, and ACLs under KRaft's StandardAuthorizer so each
principal reads only its inputs and writes only its outputs.

    secure.py init DIR N          CA, broker keystore, truststore, one password per user
    secure.py admin-env DIR       shell exports for the admin client (readiness, ACLs)
    secure.py env DIR USER        shell exports for USER (passk-gate, passk-cli, ...)
    secure.py scram-args DIR      `kafka-storage format` arguments creating the SCRAM users
    secure.py listeners DIR P C   server.properties lines for a node on ports P, C
    secure.py acls DIR            create passk's topics and every principal's ACLs

Everything secret stays in DIR (mode 0700, files 0600) and is never printed, except by
`env`/`admin-env`, whose output is meant for `eval`.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
from pathlib import Path

from services.contract.processors import PROCESSORS, TOPIC_SPECS
from services.contract.topics import Topic, TopicRef
from services.kafka.kafka_users import MECHANISM, client_env, processor_user
from services.kafka.kafka_users import passwords as _load

ADMIN = "admin"  # super user: the brokers between themselves, topic and ACL set-up
CONTROLLER = "controller"  # PLAIN on the controller listener (SCRAM cannot serve there)
CLI = "passk-cli"
REPLAY = "passk-replay"
# The replay user (and the producer SDK) may write only the two input topics.
REPLAY_WRITES = (Topic.CONVERSATION_FINISHED, Topic.SESSION_PERSISTED)
# The operator's CLI publishes scenarios, labels, calibrations and re-grade requests, and
# reads everything.
CLI_WRITES = (Topic.SCENARIOS, Topic.LABELS, Topic.JUDGE_CALIBRATIONS, Topic.REGRADE_REQUESTS)


def users() -> list[str]:
    return [ADMIN, CONTROLLER, CLI, REPLAY, *(processor_user(p) for p in PROCESSORS)]


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _keytool(*args: str, env: dict[str, str]) -> None:
    # Passwords reach keytool through its environment (`:env`), never its argv.
    subprocess.run(["keytool", *args], check=True, env={**os.environ, **env},
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def init(secrets_dir: Path) -> None:
    secrets_dir.mkdir(parents=True, exist_ok=True)
    secrets_dir.chmod(0o700)
    users_file = secrets_dir / "users.json"
    if not users_file.exists():
        passwords = {u: secrets.token_urlsafe(24) for u in users()}
        passwords["_store"] = secrets.token_urlsafe(24)
        _write_private(users_file, json.dumps(passwords, indent=1))
    passwords = _load(secrets_dir)
    missing = [u for u in users() if u not in passwords]
    if missing:  # a processor added since: give it a password too
        passwords.update({u: secrets.token_urlsafe(24) for u in missing})
        _write_private(users_file, json.dumps(passwords, indent=1))
    if (secrets_dir / "broker.p12").exists():
        return
    env = {"PASSK_STORE_PASSWORD": passwords["_store"]}
    pw = "PASSK_STORE_PASSWORD"
    ca, broker = secrets_dir / "ca.p12", secrets_dir / "broker.p12"
    common = ["-storetype", "PKCS12", "-storepass:env", pw]
    _keytool("-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048",
             "-dname", "CN=passk local CA", "-ext", "bc:c", "-validity", "3650",
             "-keystore", str(ca), *common, "-keypass:env", pw, env=env)
    _keytool("-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca), *common,
             "-file", str(secrets_dir / "ca.pem"), env=env)
    _keytool("-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048",
             "-dname", "CN=localhost", "-validity", "3650",
             "-keystore", str(broker), *common, "-keypass:env", pw, env=env)
    csr, signed = secrets_dir / "broker.csr", secrets_dir / "broker.pem"
    _keytool("-certreq", "-alias", "broker", "-keystore", str(broker), *common,
             "-file", str(csr), env=env)
    _keytool("-gencert", "-alias", "ca", "-keystore", str(ca), *common, "-rfc",
             "-infile", str(csr), "-outfile", str(signed), "-validity", "3650",
             "-ext", "SAN=dns:localhost,ip:127.0.0.1",
             "-ext", "KU=digitalSignature,keyEncipherment",
             "-ext", "EKU=serverAuth,clientAuth", env=env)
    _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(secrets_dir / "ca.pem"),
             "-keystore", str(broker), *common, env=env)
    _keytool("-importcert", "-noprompt", "-alias", "broker", "-file", str(signed),
             "-keystore", str(broker), *common, env=env)
    _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(secrets_dir / "ca.pem"),
             "-keystore", str(secrets_dir / "truststore.p12"), *common, env=env)
    for f in secrets_dir.iterdir():
        f.chmod(0o600)


def scram_args(secrets_dir: Path) -> list[str]:
    passwords = _load(secrets_dir)
    out = []
    for user in users():
        if user == CONTROLLER:
            continue
        out += ["--add-scram", f"{MECHANISM}=[name={user},password={passwords[user]}]"]
    return out


def listeners(secrets_dir: Path, port: int, controller_port: int) -> str:
    p = _load(secrets_dir)
    store = p["_store"]
    scram = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
             f'username="{ADMIN}" password="{p[ADMIN]}";')
    plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
             f'username="{CONTROLLER}" password="{p[CONTROLLER]}" '
             f'user_{CONTROLLER}="{p[CONTROLLER]}";')
    return "\n".join([
        f"listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map=CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name=SASL_SSL",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        "sasl.mechanism.controller.protocol=PLAIN",
        f"listener.name.sasl_ssl.sasl.enabled.mechanisms={MECHANISM}",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram}",
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.controller.plain.sasl.jaas.config={plain}",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={secrets_dir / 'broker.p12'}",
        f"ssl.keystore.password={store}",
        f"ssl.key.password={store}",
        "ssl.truststore.type=PKCS12",
        f"ssl.truststore.location={secrets_dir / 'truststore.p12'}",
        f"ssl.truststore.password={store}",
        "ssl.endpoint.identification.algorithm=https",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        f"super.users=User:{ADMIN};User:{CONTROLLER}",
        "allow.everyone.if.no.acl.found=false",
        "",
    ])


def principal_acls(prefix: str) -> dict[str, dict[str, list[str]]]:
    """What each principal may do, as {user: {"read": topics, "write": topics, "groups":
    groups, "prefixes": internal-topic prefixes}} — the plan, before it becomes ACLs."""

    def names(topics: tuple[TopicRef, ...]) -> list[str]:
        return [f"{prefix}{t.value}" for t in topics]

    plan: dict[str, dict[str, list[str]]] = {}
    for processor, spec in PROCESSORS.items():
        group = f"{prefix}{processor}"
        plan[processor_user(processor)] = {
            "read": names(spec.reads),
            "write": names(spec.writes),
            "groups": [group],
            # Faust's own topics (its leader topic, its table changelogs) start "<group>-".
            "prefixes": [f"{group}-"],
        }
    plan[REPLAY] = {"read": [], "write": names(REPLAY_WRITES), "groups": [], "prefixes": []}
    every = tuple(s.topic for s in TOPIC_SPECS)
    plan[CLI] = {"read": names(every), "write": names(CLI_WRITES),
                 "groups": [f"{prefix}{p}" for p in PROCESSORS], "prefixes": []}
    return plan


def apply_acls(secrets_dir: Path) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    from services.contract.settings import Settings
    from services.kafka.admin import create_topics
    from services.kafka.kafka_client import kafka_client_kwargs

    settings = Settings(**client_env(secrets_dir, ADMIN))  # type: ignore[arg-type]
    create_topics(settings)
    prefix = settings.topic_prefix
    acls = []

    def allow(user: str, op: ACLOperation, kind: ResourceType, name: str,
              pattern: ACLResourcePatternType = ACLResourcePatternType.LITERAL) -> None:
        acls.append(ACL(f"User:{user}", "*", op, ACLPermissionType.ALLOW,
                        ResourcePattern(kind, name, pattern)))

    for user, rights in principal_acls(prefix).items():
        # Metadata only: seeing that passk's topics exist (so `topics create` is a no-op),
        # and how many brokers there are (the replication passk uses).
        allow(user, ACLOperation.DESCRIBE, ResourceType.TOPIC, prefix,
              ACLResourcePatternType.PREFIXED)
        allow(user, ACLOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")
        for topic in rights["read"]:
            allow(user, ACLOperation.READ, ResourceType.TOPIC, topic)
        for topic in rights["write"]:
            allow(user, ACLOperation.WRITE, ResourceType.TOPIC, topic)
        for group in rights["groups"]:
            allow(user, ACLOperation.READ, ResourceType.GROUP, group)
        for internal in rights["prefixes"]:
            allow(user, ACLOperation.ALL, ResourceType.TOPIC, internal,
                  ACLResourcePatternType.PREFIXED)
    # `scenarios publish` writes every version in one transaction (its id: prefix + name).
    allow(CLI, ACLOperation.WRITE, ResourceType.TRANSACTIONAL_ID, f"{prefix}scenarios-publish")
    admin = KafkaAdminClient(**kafka_client_kwargs(settings))
    try:
        result = admin.create_acls(acls)
    finally:
        admin.close()
    failed = result.get("failed") if isinstance(result, dict) else None
    if failed:
        raise SystemExit(f"kafka: {len(failed)} ACL(s) were refused: {failed[:3]}")
    _wait_enforced(secrets_dir, timeout=120)
    print(f"kafka: {len(acls)} ACLs for {len(principal_acls(prefix))} principals "
          f"on prefix {prefix!r}")


def _wait_enforced(secrets_dir: Path, *, timeout: float) -> None:
    """Return once every broker lets a principal see passk's topics: the controller has
    the ACLs as soon as create_acls returns, a busy broker applies them a little later."""
    import time

    from kafka import KafkaAdminClient

    from services.contract.settings import Settings
    from services.contract.topics import topic_name
    from services.kafka.kafka_client import kafka_client_kwargs

    settings = Settings(**client_env(secrets_dir, REPLAY))  # type: ignore[arg-type]
    wanted = {topic_name(spec.topic, settings) for spec in TOPIC_SPECS}
    deadline = time.monotonic() + timeout
    for server in settings.kafka_bootstrap_servers.split(","):
        one = settings.model_copy(update={"kafka_bootstrap_servers": server})
        while True:
            admin = KafkaAdminClient(**kafka_client_kwargs(one))
            try:
                if wanted <= set(admin.list_topics()):
                    break
            finally:
                admin.close()
            if time.monotonic() > deadline:
                raise SystemExit(f"kafka: ACLs not enforced by {server} after {timeout:.0f} s")
            time.sleep(0.5)


def _exports(env: dict[str, str]) -> str:
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())


def main(argv: list[str]) -> None:
    command, secrets_dir = argv[0], Path(argv[1]).resolve()
    if command == "init":
        init(secrets_dir)
    elif command == "admin-env":
        print(_exports(client_env(secrets_dir, ADMIN)))
    elif command == "env":
        print(_exports(client_env(secrets_dir, argv[2])))
    elif command == "scram-args":
        print("\n".join(scram_args(secrets_dir)))
    elif command == "listeners":
        print(listeners(secrets_dir, int(argv[2]), int(argv[3])), end="")
    elif command == "acls":
        apply_acls(secrets_dir)
    else:
        raise SystemExit(f"unknown command {command!r}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
