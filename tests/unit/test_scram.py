"""SCRAM (zkcoord.core.scram): RFC 7677's vector, kafka-python's client
against our server, the gateway's passive verifier, and malformed input."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from zkcoord.core import scram
from zkcoord.core.scram import (
    PassiveScramVerifier, ScramAuthenticationError, ScramCredential, ScramCredentialMismatchError, ScramError,
    ScramFormatError, ScramServer,
)
from zkcoord.password import Password

# RFC 7677 section 3
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
MECHS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def rfc_credential() -> ScramCredential:
    return scram.make_credential("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)


def test_mechanisms_are_kafkas():
    assert {name: (m.hash_name, m.min_iterations, m.max_iterations) for name, m in scram.MECHANISMS.items()} == {
        "SCRAM-SHA-256": ("sha256", 4096, 16384), "SCRAM-SHA-512": ("sha512", 4096, 16384)}


def test_rfc7677_vector_server_side():
    server = ScramServer("SCRAM-SHA-256", scram.parse_client_first(RFC_CLIENT_FIRST), rfc_credential(),
                         RFC_SERVER_NONCE)
    assert server.server_first_bytes() == RFC_SERVER_FIRST
    assert server.client_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_rfc7677_vector_passive():
    verifier = PassiveScramVerifier("SCRAM-SHA-256", RFC_CLIENT_FIRST)
    assert verifier.username == "user"
    verifier.observe_server_first(RFC_SERVER_FIRST)
    verifier.observe_client_final(RFC_CLIENT_FINAL, rfc_credential())
    assert verifier.verified_client
    assert verifier.observe_server_final(RFC_SERVER_FINAL) == "user"


# ------------------------------------------------------------ credentials
def test_credential_text_round_trip_and_repr_hides_keys():
    credential = rfc_credential()
    text = scram.format_credential(credential)
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=") and text.endswith(",iterations=4096")
    assert scram.parse_credential(text) == credential
    assert scram.parse_credential(text, "SCRAM-SHA-256") == credential
    assert repr(credential) == "ScramCredential(iterations=4096)"


def test_make_credential_takes_a_password_object():
    assert scram.make_credential("SCRAM-SHA-512", Password("pw"), b"s", 4096) == \
        scram.make_credential("SCRAM-SHA-512", "pw", b"s", 4096)


GOOD = scram.format_credential(rfc_credential())
KEY = GOOD.split("stored_key=")[1].split(",")[0]


@pytest.mark.parametrize("text, says", [
    ("", "a field has no name"),
    ("salt=AA==", "missing stored_key, server_key, iterations"),
    (GOOD + ",extra=1", "it has 5 fields"),
    (GOOD.replace("salt=", "=") , "a field has no name"),
    (GOOD.replace("salt=W22Z", "salt=!22Z"), "the salt of a SCRAM credential is not base64"),
    (GOOD.replace(f"stored_key={KEY}", f"stored_key={KEY[:-2]}"), "the stored_key of a SCRAM credential is not base64"),
    (GOOD.replace("iterations=4096", "iterations=-1"), "must be a positive whole number"),
    (GOOD.replace("iterations=4096", "iterations=0"), "between 1 and 2147483647, not 0"),
    (GOOD.replace("iterations=4096", "iterations=99999999999"), "must be a positive whole number"),
    (GOOD.replace("iterations=4096", "iterations=٤"), "must be a positive whole number"),
])
def test_bad_credential_texts_name_the_fault_without_key_material(text, says):
    with pytest.raises(ValueError) as caught:
        scram.parse_credential(text)
    assert says in str(caught.value)
    assert KEY not in str(caught.value) and "W22Z" not in str(caught.value)


def test_credential_of_the_wrong_mechanism_is_refused_when_asked():
    with pytest.raises(ValueError, match="not SCRAM-SHA-512 keys"):
        scram.parse_credential(GOOD, "SCRAM-SHA-512")


# ------------------------------------------------------------ kafka-python's client against our server
def login(mech: str, credential: ScramCredential | None, user: str, password: str, nonce: str = "srvnonce"):
    client = ScramClient(user, password, mech)
    server = ScramServer(mech, scram.parse_client_first(client.first_message()), credential, nonce,
                         unknown_user_key=b"process secret")
    first = server.server_first_bytes()
    client.process_server_first_message(first)
    final = server.client_final(client.final_message())
    client.process_server_final_message(final)  # raises if our signature is wrong
    return server, first


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python_client_logs_in_with_the_right_password(mech):
    credential = scram.make_credential(mech, "alice-secret", b"0123456789abcdef", 4096)
    server, first = login(mech, credential, "alice", "alice-secret")
    assert server.complete and server.username == "alice"
    assert scram.parse_server_first(first).salt == b"0123456789abcdef"


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python_client_with_the_wrong_password_is_refused(mech):
    credential = scram.make_credential(mech, "alice-secret", b"0123456789abcdef", 4096)
    with pytest.raises(ScramAuthenticationError, match=r"wrong .* proof for user 'alice' \(wrong password\)"):
        login(mech, credential, "alice", "guess")


@pytest.mark.parametrize("mech", MECHS)
def test_unknown_user_looks_like_a_wrong_password(mech):
    with pytest.raises(ScramAuthenticationError, match="user 'mallory' has no .* credential") as caught:
        login(mech, None, "mallory", "guess")
    assert type(caught.value) is ScramAuthenticationError  # the class of a wrong password too
    salts = set()
    for nonce in ("n1", "n2"):  # the same made-up salt on every try, and a Kafka-like one
        server = ScramServer(mech, scram.parse_client_first(b"n,,n=mallory,r=abc"), None, nonce,
                             unknown_user_key=b"k")
        parsed = scram.parse_server_first(server.server_first_bytes())
        salts.add(parsed.salt)
        assert parsed.iterations == 4096
    assert len(salts) == 1 and next(iter(salts)).isalnum() and 20 <= len(next(iter(salts))) <= 26
    other = ScramServer(mech, scram.parse_client_first(b"n,,n=eve,r=abc"), None, "n", unknown_user_key=b"k")
    assert scram.parse_server_first(other.server_first_bytes()).salt not in salts


def test_names_with_comma_and_equals_are_escaped():
    assert scram.sasl_name("a=b,c") == "a=3Db=2Cc"
    assert scram.unescape_sasl_name("a=3Db=2Cc") == "a=b,c"
    credential = scram.make_credential("SCRAM-SHA-256", "pw", b"salt", 4096)
    first = scram.parse_client_first(b"n,a=a=3Db=2Cc,n=a=3Db=2Cc,r=xyz")
    assert (first.username, first.authzid, first.gs2_header) == ("a=b,c", "a=b,c", "n,a=a=3Db=2Cc,")
    server = ScramServer("SCRAM-SHA-256", first, credential, "srv")
    assert server.username == "a=b,c"


@given(st.text(st.characters(min_codepoint=1, max_codepoint=127), min_size=1, max_size=30))
def test_escaping_round_trips(name):
    assert scram.unescape_sasl_name(scram.sasl_name(name)) == name


def client_final_for(mech: str, password: str, client_first: bytes, server_first: bytes,
                     channel: bytes = b"n,,") -> bytes:
    """A client-final computed by hand (RFC 5802), for messages kafka-python cannot make."""
    mechanism = scram.MECHANISMS[mech]
    first = scram.parse_client_first(client_first)
    sf = scram.parse_server_first(server_first)
    salted = __import__("hashlib").pbkdf2_hmac(mechanism.hash_name, password.encode(), sf.salt, sf.iterations)
    client_key = mechanism.hmac(salted, b"Client Key")
    without = f"c={base64.b64encode(channel).decode()},r={sf.nonce}"
    auth = f"{first.bare},{server_first.decode()},{without}".encode()
    signature = mechanism.hmac(mechanism.hash(client_key), auth)
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without},p={base64.b64encode(proof).decode()}".encode()


def test_authzid_equal_to_the_user_logs_in():
    credential = scram.make_credential("SCRAM-SHA-256", "pw", b"salt", 4096)
    cf = b"n,a=bob,n=bob,r=cnonce"
    server = ScramServer("SCRAM-SHA-256", scram.parse_client_first(cf), credential, "snonce")
    final = client_final_for("SCRAM-SHA-256", "pw", cf, server.server_first_bytes(), b"n,a=bob,")
    assert server.client_final(final).startswith(b"v=")


def test_the_channel_binding_must_be_the_gs2_header():
    credential = scram.make_credential("SCRAM-SHA-256", "pw", b"salt", 4096)
    cf = b"n,a=bob,n=bob,r=cnonce"
    server = ScramServer("SCRAM-SHA-256", scram.parse_client_first(cf), credential, "snonce")
    final = client_final_for("SCRAM-SHA-256", "pw", cf, server.server_first_bytes(), b"n,,")  # c=biws
    with pytest.raises(ScramFormatError, match=r"channel binding \(c=\) is not the gs2 header"):
        server.client_final(final)


@pytest.mark.parametrize("client_first, says", [
    (b"n,a=eve,n=bob,r=x", "authorization id that is not its user name"),
    (b"n,,n=bob,r=x,tokenauth=true", "delegation-token login"),
    (b"n,,n=bob,r=x,tokenauth=TRUE", "delegation-token login"),
])
def test_refused_at_the_first_message(client_first, says):
    credential = scram.make_credential("SCRAM-SHA-256", "pw", b"salt", 4096)
    with pytest.raises(ScramAuthenticationError, match=says):
        ScramServer("SCRAM-SHA-256", scram.parse_client_first(client_first), credential, "n")
    with pytest.raises(ScramAuthenticationError, match=says):
        PassiveScramVerifier("SCRAM-SHA-256", client_first)


def test_other_extensions_are_ignored():
    first = scram.parse_client_first(b"n,,n=bob,r=x,tokenauth=false,foo=a=b")
    assert first.extensions == (("tokenauth", "false"), ("foo", "a=b")) and not first.token_auth
    assert first.bare == "n=bob,r=x,tokenauth=false,foo=a=b"


def test_credentials_below_the_minimum_iterations_or_of_the_wrong_size_are_refused():
    low = scram.make_credential("SCRAM-SHA-256", "pw", b"salt", 4095)
    first = scram.parse_client_first(b"n,,n=bob,r=x")
    with pytest.raises(ScramAuthenticationError, match="has 4095 iterations, fewer than the minimum 4096"):
        ScramServer("SCRAM-SHA-256", first, low, "n")
    other = scram.make_credential("SCRAM-SHA-256", "pw", b"salt", 4096)
    with pytest.raises(ScramAuthenticationError, match="does not have SCRAM-SHA-512 keys"):
        ScramServer("SCRAM-SHA-512", first, other, "n")


def test_nonce_of_the_client_final_must_be_the_servers():
    credential = scram.make_credential("SCRAM-SHA-256", "pw", b"salt", 4096)
    server = ScramServer("SCRAM-SHA-256", scram.parse_client_first(b"n,,n=bob,r=x"), credential, "srv")
    with pytest.raises(ScramFormatError, match="nonce is not the one of the server-first"):
        server.client_final(b"c=biws,r=xsrvX,p=AAAA")
    with pytest.raises(ScramAuthenticationError):  # a proof of the wrong size
        server.client_final(b"c=biws,r=xsrv,p=AAAA")


@pytest.mark.parametrize("nonce", ["", "a,b", "caf\u00e9", "a b"])
def test_the_callers_server_nonce_is_checked(nonce):
    with pytest.raises(ValueError, match="server nonce"):
        ScramServer("SCRAM-SHA-256", scram.parse_client_first(b"n,,n=bob,r=x"), None, nonce)


def test_a_completed_server_takes_no_more_messages():
    server, _ = login("SCRAM-SHA-256", scram.make_credential("SCRAM-SHA-256", "pw", b"s", 4096), "u", "pw")
    with pytest.raises(ScramFormatError, match="complete"):
        server.client_final(b"c=biws,r=x,p=")


# ------------------------------------------------------------ the passive verifier
def passive_run(mech: str, broker_credential: ScramCredential, password: str):
    """kafka-python's client logs in to our server standing for the broker;
    the verifier watches. Returns (verifier, the four messages)."""
    client = ScramClient("alice", password, mech)
    cf = client.first_message()
    broker = ScramServer(mech, scram.parse_client_first(cf), broker_credential, "brokernonce")
    verifier = PassiveScramVerifier(mech, cf)
    sf = broker.server_first_bytes()
    client.process_server_first_message(sf)
    return verifier, cf, sf, client.final_message(), broker


@pytest.mark.parametrize("mech", MECHS)
def test_passive_verifier_accepts_a_real_exchange(mech):
    credential = scram.make_credential(mech, "pw", b"saltsalt", 8192)
    verifier, _, sf, final, broker = passive_run(mech, credential, "pw")
    verifier.observe_server_first(sf)
    verifier.observe_client_final(final, credential)
    assert verifier.observe_server_final(broker.client_final(final)) == "alice"


@pytest.mark.parametrize("mech", MECHS)
def test_passive_verifier_refuses_a_wrong_proof(mech):
    credential = scram.make_credential(mech, "pw", b"saltsalt", 4096)
    verifier, _, sf, final, _ = passive_run(mech, credential, "not-pw")
    verifier.observe_server_first(sf)
    with pytest.raises(ScramAuthenticationError, match="wrong .* proof for user 'alice'"):
        verifier.observe_client_final(final, credential)
    with pytest.raises(ScramFormatError, match="out of turn"):
        verifier.observe_server_final(b"v=AAAA")


def test_passive_verifier_refuses_a_server_signature_of_another_key():
    mine = scram.make_credential("SCRAM-SHA-256", "pw", b"saltsalt", 4096)
    # same salt, iterations and stored key, another server key: the broker does not hold our credential
    broker_cred = ScramCredential(mine.salt, mine.stored_key, bytes(32), 4096)
    verifier, _, sf, final, broker = passive_run("SCRAM-SHA-256", broker_cred, "pw")
    verifier.observe_server_first(sf)
    verifier.observe_client_final(final, mine)
    with pytest.raises(ScramAuthenticationError, match="server signature for user 'alice' does not match"):
        verifier.observe_server_final(broker.client_final(final))


def test_passive_verifier_names_a_credential_that_changed():
    ours = scram.make_credential("SCRAM-SHA-256", "pw", b"old-salt", 4096)
    brokers = scram.make_credential("SCRAM-SHA-256", "pw", b"new-salt", 4096)
    verifier, _, sf, final, _ = passive_run("SCRAM-SHA-256", brokers, "pw")
    verifier.observe_server_first(sf)
    with pytest.raises(ScramCredentialMismatchError, match="differs from the credential in ZooKeeper"):
        verifier.observe_client_final(final, ours)


def test_passive_verifier_refusals_of_order_and_unknown_users():
    credential = scram.make_credential("SCRAM-SHA-256", "pw", b"saltsalt", 4096)
    verifier, _, sf, final, _ = passive_run("SCRAM-SHA-256", credential, "pw")
    with pytest.raises(ScramFormatError, match="out of turn"):
        verifier.observe_client_final(final, credential)
    with pytest.raises(ScramFormatError, match="does not extend the client's nonce"):
        verifier.observe_server_first(b"r=other,s=AAAA,i=4096")
    verifier.observe_server_first(sf)
    with pytest.raises(ScramFormatError, match="second"):
        verifier.observe_server_first(sf)
    with pytest.raises(ScramAuthenticationError, match="no SCRAM-SHA-256 credential in ZooKeeper"):
        verifier.observe_client_final(final, None)
    verifier.observe_client_final(final, credential)
    with pytest.raises(ScramAuthenticationError, match=r"the broker refused .* \(e=invalid-proof\)"):
        verifier.observe_server_final(b"e=invalid-proof")


# ------------------------------------------------------------ malformed messages
@pytest.mark.parametrize("data, says", [
    (b"", "is not 'n,"), (b"n,,n=,r=x", "is not 'n,"), (b"n,,n=bob", "is not 'n,"),
    (b"y,,n=bob,r=x", "channel binding"), (b"p=tls-unique,,n=bob,r=x", "channel binding"),
    (b"n,,n=b=ob,r=x", "is not 'n,"), (b"n,,n=bob,r=a,b", "is not 'n,"), (b"n,,m=ext,n=bob,r=x", "reserved m="),
    (b"n,,n=b\xc3\xa9,r=x", "not ASCII"), (b"n,,n=bob,r=x,1=2", "is not 'n,"), (b"\xff", "not ASCII"),
])
def test_bad_client_first(data, says):
    with pytest.raises(ScramFormatError, match=says):
        scram.parse_client_first(data)


@pytest.mark.parametrize("data", [b"", b"r=x,s=AAAA", b"r=x,s=A,i=1", b"r=x,s=AAAA,i=0", b"r=x,s=AAAA,i=-1",
                                  b"r=x,s=AAAA,i=99999999999", b"m=1,r=x,s=AAAA,i=1", b"s=AAAA,r=x,i=1"])
def test_bad_server_first(data):
    with pytest.raises(ScramFormatError):
        scram.parse_server_first(data)


@pytest.mark.parametrize("data", [b"", b"c=biws,r=x", b"c=biws,p=AAAA", b"c=b,r=x,p=AAAA", b"r=x,c=biws,p=AAAA",
                                  b"c=biws,r=x,p=AAA"])
def test_bad_client_final(data):
    with pytest.raises(ScramFormatError):
        scram.parse_client_final(data)


@pytest.mark.parametrize("data", [b"", b"x=1", b"e=", b"e=a=b", b"v=AAA", b"e=bad,v=AAAA"])
def test_bad_server_final(data):
    with pytest.raises(ScramFormatError):
        scram.parse_server_final(data)


def test_server_final_forms():
    assert scram.parse_server_final(b"e=invalid-proof") == scram.ServerFinal("invalid-proof", None)
    assert scram.parse_server_final(b"v=AAAA,x=1").signature == b"\0\0\0"


SCRAMMY = st.one_of(
    st.binary(max_size=80),
    st.lists(st.sampled_from([b"n", b",", b"=", b"a", b"r", b"c", b"p", b"s", b"i", b"v", b"e", b"m", b"biws",
                              b"=2C", b"=3D", b"AAAA", b"1", b"\x00", b"\xff", b"y", b"tokenauth"]),
             max_size=30).map(b"".join))


@settings(max_examples=400, deadline=None)
@given(SCRAMMY)
def test_parsers_raise_only_scram_format_errors(data):
    for parse in (scram.parse_client_first, scram.parse_server_first, scram.parse_client_final,
                  scram.parse_server_final):
        try:
            parse(data)
        except ScramFormatError:
            pass


@settings(max_examples=300, deadline=None)
@given(SCRAMMY, SCRAMMY, SCRAMMY)
def test_exchanges_raise_only_scram_errors(client_first, middle, last):
    credential = scram.make_credential("SCRAM-SHA-256", "pw", b"saltsalt", 4096)
    try:
        server = ScramServer("SCRAM-SHA-256", scram.parse_client_first(client_first), credential, "srv")
        server.client_final(middle)
    except ScramError:
        pass
    try:
        verifier = PassiveScramVerifier("SCRAM-SHA-256", client_first)
        verifier.observe_server_first(middle)
        verifier.observe_client_final(last, credential)
        verifier.observe_server_final(last)
    except ScramError:
        pass
