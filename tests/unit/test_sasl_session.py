"""One connection's SASL login (zkcoord.core.sasl): every transition, and
whole logins whose client side is kafka-python's own PLAIN and SCRAM code."""

from __future__ import annotations

import pytest
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import SaslMechanismScram

from zkcoord.core import scram
from zkcoord.core.api_keys import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from zkcoord.core.errors import ErrorCode
from zkcoord.core.sasl import TRANSITIONS, AuthenticateReply, Event, HandshakeReply, Lookup, SaslSession, SaslState
from zkcoord.errors import ConfigError
from zkcoord.password import Password

ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
METADATA, JOIN_GROUP = 3, 11
KEY = b"a random key of the process"
SCRAM_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


def session_at(state: SaslState, mechanism: str = "SCRAM-SHA-512") -> SaslSession:
    """A session driven to ``state`` through its public steps."""
    s = SaslSession(ALL, unknown_user_key=KEY)
    if state is SaslState.HANDSHAKE_OR_VERSIONS:
        return s
    if state is SaslState.HANDSHAKE:
        s.api_versions_answered(0)
        return s
    if state is SaslState.FAILED:
        assert s.admit(METADATA) is False
        return s
    assert s.handshake(mechanism).error_code == ErrorCode.NONE
    if state is SaslState.AUTHENTICATE:
        return s
    token = b"n,,n=alice,r=cnonce" if mechanism != "PLAIN" else b"\0alice\0pw"
    assert isinstance(s.authenticate(token), Lookup)
    if state is SaslState.LOOKUP:
        return s
    credential = scram.make_credential(mechanism, "pw", b"salt", 4096) if mechanism != "PLAIN" else True
    assert s.resume(credential, "snonce").error_code == ErrorCode.NONE
    if state is SaslState.CHALLENGED:
        return s
    assert state is SaslState.COMPLETE and mechanism == "PLAIN"
    return s


# ------------------------------------------------------------ the table
def test_the_table_covers_every_state_and_leads_to_complete_or_failed():
    sources = {state for state, _ in TRANSITIONS}
    assert sources == set(SaslState) - {SaslState.COMPLETE, SaslState.FAILED}
    assert all((state, Event.REFUSED) in TRANSITIONS for state in sources)
    assert {TRANSITIONS[(s, Event.REFUSED)] for s in sources} == {SaslState.FAILED}


@pytest.mark.parametrize("state, admitted", [
    (SaslState.HANDSHAKE_OR_VERSIONS, {API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE}),
    (SaslState.HANDSHAKE, {SASL_HANDSHAKE, SASL_AUTHENTICATE}),
    (SaslState.AUTHENTICATE, {SASL_HANDSHAKE, SASL_AUTHENTICATE}),
    (SaslState.CHALLENGED, {SASL_HANDSHAKE, SASL_AUTHENTICATE}),
    (SaslState.FAILED, set()),
])
def test_what_each_state_admits_and_that_the_rest_closes(state, admitted):
    for api_key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, JOIN_GROUP, 0, 10):
        s = session_at(state)
        assert s.admit(api_key) is (api_key in admitted), api_key
        assert s.state is (state if api_key in admitted else SaslState.FAILED)


def test_after_the_login_every_request_is_admitted():
    s = session_at(SaslState.COMPLETE, "PLAIN")
    assert all(s.admit(k) for k in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, JOIN_GROUP))
    assert s.state is SaslState.COMPLETE


def test_nothing_may_be_read_while_a_lookup_is_out():
    s = session_at(SaslState.LOOKUP)
    with pytest.raises(RuntimeError, match="lookup is out"):
        s.admit(SASL_AUTHENTICATE)
    with pytest.raises(RuntimeError, match="not possible in state lookup"):
        s.authenticate(b"x")
    with pytest.raises(RuntimeError, match="not possible in state lookup"):
        s.handshake("PLAIN")
    with pytest.raises(RuntimeError, match="without a lookup"):
        session_at(SaslState.AUTHENTICATE).resume(None, "n")
    with pytest.raises(RuntimeError, match="without a lookup"):
        session_at(SaslState.AUTHENTICATE).lookup_failed("why")


def test_mechanisms_must_be_known_and_some():
    with pytest.raises(ConfigError, match="'GSSAPI' is not supported"):
        SaslSession(["PLAIN", "GSSAPI"])
    with pytest.raises(ConfigError, match="it is empty"):
        SaslSession([])
    assert SaslSession(["SCRAM-SHA-512", "PLAIN", "SCRAM-SHA-512"], unknown_user_key=KEY).mechanisms == (
        "SCRAM-SHA-512", "PLAIN")


def test_scram_needs_the_key_for_unknown_users():
    with pytest.raises(ValueError, match="needs unknown_user_key"):
        SaslSession(["PLAIN", "SCRAM-SHA-256"])
    assert SaslSession(["PLAIN"]).mechanisms == ("PLAIN",)


# ------------------------------------------------------------ ApiVersions and SaslHandshake
def test_api_versions_then_handshake():
    s = SaslSession(["SCRAM-SHA-512", "PLAIN"], unknown_user_key=KEY)
    assert s.admit(API_VERSIONS)
    s.api_versions_answered(ErrorCode.UNSUPPORTED_VERSION)  # the client may ask again with a lower version
    assert s.state is SaslState.HANDSHAKE_OR_VERSIONS and s.admit(API_VERSIONS)
    s.api_versions_answered(0)
    assert s.state is SaslState.HANDSHAKE
    assert s.admit(API_VERSIONS) is False and s.state is SaslState.FAILED  # Kafka: only the handshake now


@pytest.mark.parametrize("start", [SaslState.HANDSHAKE_OR_VERSIONS, SaslState.HANDSHAKE])
def test_handshake_with_an_enabled_mechanism(start):
    s = session_at(start)
    assert s.handshake("SCRAM-SHA-256") == HandshakeReply(ErrorCode.NONE, ALL)
    assert s.state is SaslState.AUTHENTICATE and s.mechanism == "SCRAM-SHA-256"


def test_handshake_with_another_mechanism_lists_ours_and_closes():
    s = SaslSession(["SCRAM-SHA-512"], unknown_user_key=KEY)
    reply = s.handshake("GSSAPI")
    assert (reply.error_code, reply.mechanisms, reply.close) == (
        ErrorCode.UNSUPPORTED_SASL_MECHANISM, ("SCRAM-SHA-512",), True)
    assert "'GSSAPI'" in reply.log_reason and s.state is SaslState.FAILED


def test_handshake_v0_is_not_served():
    s = SaslSession(["PLAIN"])
    reply = s.handshake("PLAIN", version=0)
    assert (reply.error_code, reply.close, s.state) == (ErrorCode.UNSUPPORTED_VERSION, True, SaslState.FAILED)


@pytest.mark.parametrize("state", [SaslState.AUTHENTICATE, SaslState.CHALLENGED])
def test_a_second_handshake_before_the_login_is_illegal_and_closes(state):
    s = session_at(state)
    assert s.handshake("SCRAM-SHA-512") == HandshakeReply(
        ErrorCode.ILLEGAL_SASL_STATE, (), close=True, log_reason="a second SaslHandshake before the login completed")
    assert s.state is SaslState.FAILED


def test_after_the_login_handshake_and_authenticate_are_illegal_but_the_connection_stays():
    s = session_at(SaslState.COMPLETE, "PLAIN")
    hs = s.handshake("PLAIN")
    assert (hs.error_code, hs.mechanisms, hs.close) == (ErrorCode.ILLEGAL_SASL_STATE, (), False)
    auth = s.authenticate(b"\0alice\0pw")
    assert (auth.error_code, auth.error_message, auth.close, auth.principal) == (
        ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication", False,
        None)
    assert s.state is SaslState.COMPLETE and s.principal == "User:alice"


@pytest.mark.parametrize("state", [SaslState.HANDSHAKE_OR_VERSIONS, SaslState.HANDSHAKE])
def test_authenticate_before_the_handshake_is_illegal_and_closes(state):
    s = session_at(state)
    assert s.admit(SASL_AUTHENTICATE)
    reply = s.authenticate(b"\0alice\0pw")
    assert (reply.error_code, reply.close, s.state) == (ErrorCode.ILLEGAL_SASL_STATE, True, SaslState.FAILED)
    assert reply.error_message == "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake."


# ------------------------------------------------------------ PLAIN, with kafka-python's client
def plain_client(user: str, password: str) -> SaslMechanismPlain:
    return SaslMechanismPlain(sasl_plain_username=user, sasl_plain_password=password,
                              security_protocol="SASL_SSL")


def test_plain_login_with_kafka_pythons_client():
    client = plain_client("alice", "alice-pw")
    s = session_at(SaslState.AUTHENTICATE, "PLAIN")
    lookup = s.authenticate(client.auth_bytes())
    assert lookup == Lookup("PLAIN", "alice", Password("alice-pw"))
    assert "alice-pw" not in repr(lookup)
    reply = s.resume(True)
    assert reply == AuthenticateReply(ErrorCode.NONE, None, b"", 0, False, "User:alice")
    client.receive(reply.auth_bytes)
    assert client.is_authenticated() and s.complete and s.principal == "User:alice"


def test_plain_wrong_password():
    s = session_at(SaslState.AUTHENTICATE, "PLAIN")
    s.authenticate(plain_client("alice", "guess").auth_bytes())
    reply = s.resume(False)
    assert (reply.error_code, reply.error_message, reply.close, reply.principal) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED, "Authentication failed: Invalid username or password", True, None)
    assert "guess" not in reply.log_reason and "'alice'" in reply.log_reason
    assert s.state is SaslState.FAILED


@pytest.mark.parametrize("token, message", [
    (b"alice\0pw", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"a\0b\0c\0d\0e", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    (b"\0\0pw", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
])
def test_plain_malformed_messages_get_kafkas_texts(token, message):
    s = session_at(SaslState.AUTHENTICATE, "PLAIN")
    reply = s.authenticate(token)
    assert (reply.error_code, reply.error_message, reply.close) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED, message, True)
    assert s.state is SaslState.FAILED


def test_plain_authzid_must_be_the_user():
    s = session_at(SaslState.AUTHENTICATE, "PLAIN")
    assert s.authenticate(b"admin\0alice\0pw") == Lookup("PLAIN", "alice", Password("pw"))
    reply = s.resume(True)
    assert reply.error_message == ("Authentication failed: Client requested an authorization id that is different "
                                   "from username") and reply.close


def test_plain_lookup_that_failed():
    s = session_at(SaslState.LOOKUP, "PLAIN")
    reply = s.lookup_failed("users file /etc/users unreadable")
    assert (reply.error_code, reply.error_message, reply.close) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED, "Authentication failed: credentials for user could not be verified",
        True)
    assert "users file /etc/users unreadable" in reply.log_reason
    with pytest.raises(TypeError):
        session_at(SaslState.LOOKUP, "PLAIN").resume(scram.make_credential("SCRAM-SHA-256", "x", b"s", 4096))


# ------------------------------------------------------------ SCRAM, with kafka-python's client
def scram_client(mech: str, user: str, password: str) -> SaslMechanismScram:
    return SaslMechanismScram(sasl_plain_username=user, sasl_plain_password=password, sasl_mechanism=mech,
                              security_protocol="SASL_SSL")


def scram_login(mech: str, credential, password: str, user: str = "alice"):
    """Drive a whole login; returns (session, client, last reply)."""
    client = scram_client(mech, user, password)
    s = SaslSession(ALL, unknown_user_key=b"key")
    assert s.admit(API_VERSIONS)
    s.api_versions_answered(0)
    assert s.admit(SASL_HANDSHAKE) and s.handshake(mech).error_code == ErrorCode.NONE
    assert s.admit(SASL_AUTHENTICATE)
    lookup = s.authenticate(client.auth_bytes())
    assert lookup == Lookup(mech, user)
    first = s.resume(credential, "serverNonce-123")
    assert (first.error_code, first.close, first.session_lifetime_ms) == (ErrorCode.NONE, False, 0)
    assert s.state is SaslState.CHALLENGED
    client.receive(first.auth_bytes)
    assert s.admit(SASL_AUTHENTICATE)
    return s, client, s.authenticate(client.auth_bytes())


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_with_kafka_pythons_client(mech):
    credential = scram.make_credential(mech, "alice-pw", b"kafka-like-salt", 4096)
    s, client, reply = scram_login(mech, credential, "alice-pw")
    assert (reply.error_code, reply.error_message, reply.close, reply.principal, reply.session_lifetime_ms) == (
        ErrorCode.NONE, None, False, "User:alice", 0)
    client.receive(reply.auth_bytes)  # checks our server signature
    assert client.is_done() and s.complete and s.principal == "User:alice" and s.admit(JOIN_GROUP)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user_fail_alike(mech):
    credential = scram.make_credential(mech, "alice-pw", b"kafka-like-salt", 4096)
    replies = [scram_login(mech, credential, "guess")[2], scram_login(mech, None, "guess", user="nobody")[2]]
    for reply in replies:
        assert (reply.error_code, reply.error_message, reply.close, reply.principal, reply.auth_bytes) == (
            ErrorCode.SASL_AUTHENTICATION_FAILED, SCRAM_FAILED.format(mech), True, None, b"")
        assert "guess" not in reply.log_reason
    assert "wrong password" in replies[0].log_reason and "has no" in replies[1].log_reason


@pytest.mark.parametrize("token, reason", [
    (b"n,,n=alice,r=x,tokenauth=true", "delegation-token login"),
    (b"p=tls-unique,,n=alice,r=x", "channel binding"),
    (b"garbage", "client-first message is not"),
])
def test_scram_first_messages_refused_before_any_lookup(token, reason):
    s = session_at(SaslState.AUTHENTICATE)
    reply = s.authenticate(token)
    assert (reply.error_code, reply.error_message, reply.close) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED, SCRAM_FAILED.format("SCRAM-SHA-512"), True)
    assert reason in reply.log_reason and s.state is SaslState.FAILED


def test_scram_authzid_other_than_the_user_gets_kafkas_own_text():
    s = session_at(SaslState.AUTHENTICATE)
    reply = s.authenticate(b"n,a=admin,n=alice,r=x")
    assert reply.error_message == ("Authentication failed: Client requested an authorization id that is "
                                   "different from username") and reply.close


def test_scram_credential_below_the_minimum_iterations_fails_at_once():
    s = session_at(SaslState.LOOKUP)
    reply = s.resume(scram.make_credential("SCRAM-SHA-512", "pw", b"s", 1000), "n")
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and reply.close
    assert "1000 iterations" in reply.log_reason


def test_scram_lookup_that_failed_and_bad_resumes():
    s = session_at(SaslState.LOOKUP)
    reply = s.lookup_failed("ZooKeeper at zk:2181 did not answer within 10 s")
    assert (reply.error_code, reply.error_message, reply.close) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED, SCRAM_FAILED.format("SCRAM-SHA-512"), True)
    assert "did not answer" in reply.log_reason
    with pytest.raises(TypeError):
        session_at(SaslState.LOOKUP).resume(True, "n")
    with pytest.raises(ValueError, match="server nonce"):
        session_at(SaslState.LOOKUP).resume(None)


def test_scram_malformed_final_message_fails():
    s = session_at(SaslState.CHALLENGED)
    reply = s.authenticate(b"c=biws,r=nope,p=AAAA")
    assert (reply.error_code, reply.close, s.state) == (ErrorCode.SASL_AUTHENTICATION_FAILED, True, SaslState.FAILED)
