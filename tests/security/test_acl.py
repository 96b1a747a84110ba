"""The ACL model and Kafka's authorizer rules: deny wins, implied operations, wildcards, prefixes,
super users, allow.everyone.if.no.acl.found, authorizeByResourceType, filters, validation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triolog.broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
)

Op, Perm, RT, PT = AclOperation, AclPermissionType, ResourceType, PatternType
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"
#: Every operation an ACL may name (ANY and UNKNOWN are filter-only).
REAL_OPS = [op for op in Op if op not in (Op.ANY, Op.UNKNOWN)]
#: Every operation an action may ask for (ALL is a wildcard of ACLs, not an action).
ACTIONS = [op for op in REAL_OPS if op != Op.ALL]


def acl(principal=ALICE, op=Op.READ, perm=Perm.ALLOW, name="orders", pattern=PT.LITERAL,
        rtype=RT.TOPIC, host="*") -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm))


def authorizer(*bindings, super_users=(), allow_everyone=False) -> AclAuthorizer:
    return AclAuthorizer(super_users, allow_everyone, bindings)


# -- parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, member", [
    ("Read", Op.READ), ("READ", Op.READ), ("DescribeConfigs", Op.DESCRIBE_CONFIGS),
    ("describe_configs", Op.DESCRIBE_CONFIGS), ("IdempotentWrite", Op.IDEMPOTENT_WRITE),
    ("Prefixed", PT.PREFIXED), ("literal", PT.LITERAL), ("Topic", RT.TOPIC),
    ("TransactionalId", RT.TRANSACTIONAL_ID), ("Allow", Perm.ALLOW), ("deny", Perm.DENY),
])
def test_enums_parse_kafka_names_in_any_case(text, member):
    assert type(member).parse(text) is member


def test_enums_carry_kafka_wire_codes():
    assert (RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID, RT.DELEGATION_TOKEN, RT.USER) == (2, 3, 4, 5, 6, 7)
    assert (PT.ANY, PT.MATCH, PT.LITERAL, PT.PREFIXED) == (1, 2, 3, 4)
    assert (Op.ALL, Op.READ, Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_TOKENS) == (2, 3, 10, 12, 14)
    assert (Perm.DENY, Perm.ALLOW) == (2, 3)
    assert Op.parse(4) is Op.WRITE


def test_enums_refuse_unknown_names_with_the_choices():
    with pytest.raises(InvalidAclError, match="unknown name 'Reed'.*READ"):
        Op.parse("Reed")
    with pytest.raises(InvalidAclError, match="no code 99"):
        RT.parse(99)


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("binding, message", [
    (acl(rtype=RT.ANY), "Invalid resource type ANY"),
    (acl(rtype=RT.UNKNOWN), "Invalid resource type UNKNOWN"),
    (acl(pattern=PT.MATCH), "Invalid pattern type MATCH"),
    (acl(pattern=PT.ANY), "Invalid pattern type ANY"),
    (acl(pattern=PT.UNKNOWN), "Invalid pattern type UNKNOWN"),
    (acl(op=Op.ANY), "Invalid operation ANY"),
    (acl(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl(perm=Perm.ANY), "Invalid permission type ANY"),
    (acl(perm=Perm.UNKNOWN), "Invalid permission type UNKNOWN"),
    (acl(name=""), "Resource name should not be empty"),
    (acl(rtype=RT.CLUSTER, name="my-cluster"), "only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(pattern=PT.PREFIXED, name="*"), "PREFIXED pattern cannot have the name '\\*'"),
    (acl(principal="alice"), "Invalid principal 'alice'.*principalType:principalName"),
    (acl(principal="User:"), "Invalid principal"),
    (acl(principal=":alice"), "Invalid principal"),
])
def test_invalid_bindings_are_refused_with_a_message(binding, message):
    with pytest.raises(InvalidAclError, match=message):
        binding.validate()
    with pytest.raises(ValueError, match=message):
        authorizer().add([acl(), binding])


def test_a_refused_batch_adds_nothing():
    auth = authorizer()
    with pytest.raises(InvalidAclError):
        auth.add([acl(), acl(name="")])
    assert auth.bindings() == []


def test_valid_bindings_of_every_kind_are_accepted():
    auth = authorizer(acl(rtype=RT.CLUSTER, name=CLUSTER_NAME, op=Op.IDEMPOTENT_WRITE),
                      acl(name="*"), acl(pattern=PT.PREFIXED, name="ord"), acl(principal="User:*"),
                      acl(rtype=RT.GROUP, name="g", perm=Perm.DENY, op=Op.ALL))
    assert len(auth) == 5
    assert auth.add([acl(name="*")]) == []  # already there: not added twice
    assert len(auth) == 5


# -- authorize ---------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ACTIONS, ids=lambda o: o.name)
@pytest.mark.parametrize("deny_op", [Op.ALL, "same"], ids=["deny-ALL", "deny-same"])
@pytest.mark.parametrize("allow_op", [Op.ALL, "same"], ids=["allow-ALL", "allow-same"])
def test_deny_wins_over_allow_for_every_operation(action, deny_op, allow_op):
    deny = acl(op=action if deny_op == "same" else deny_op, perm=Perm.DENY)
    allow = acl(op=action if allow_op == "same" else allow_op)
    assert authorizer(allow).authorize(ALICE, HOST, action, RT.TOPIC, "orders")
    assert not authorizer(allow, deny).authorize(ALICE, HOST, action, RT.TOPIC, "orders")
    # a deny from another pattern that applies (wildcard, prefix) wins too
    for other in (acl(name="*", op=deny.entry.operation, perm=Perm.DENY),
                  acl(name="or", pattern=PT.PREFIXED, op=deny.entry.operation, perm=Perm.DENY)):
        assert not authorizer(allow, other).authorize(ALICE, HOST, action, RT.TOPIC, "orders")


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_read_write_delete_alter_imply_describe(op):
    auth = authorizer(acl(op=op))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, RT.TOPIC, "orders")


def test_alter_configs_implies_describe_configs_only():
    auth = authorizer(acl(op=Op.ALTER_CONFIGS))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, RT.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.ALTER, RT.TOPIC, "orders")


@pytest.mark.parametrize("op", [op for op in ACTIONS if op not in (Op.DESCRIBE, Op.DESCRIBE_CONFIGS)])
def test_no_operation_but_all_implies_another(op):
    """Only DESCRIBE and DESCRIBE_CONFIGS are implied; e.g. DESCRIBE allows neither READ nor anything else."""
    others = [o for o in ACTIONS if o != op]
    auth = authorizer(*(acl(op=o) for o in others if o not in (Op.DESCRIBE, Op.DESCRIBE_CONFIGS)
                        or op not in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALTER_CONFIGS)))
    assert not auth.authorize(ALICE, HOST, op, RT.TOPIC, "orders")
    assert authorizer(acl(op=Op.ALL)).authorize(ALICE, HOST, op, RT.TOPIC, "orders")


def test_a_deny_does_not_spread_to_implied_operations():
    """DENY READ does not deny DESCRIBE (implication is for ALLOW only)."""
    auth = authorizer(acl(op=Op.DESCRIBE), acl(op=Op.READ, perm=Perm.DENY))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, RT.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")


def test_wildcard_principal_host_and_resource():
    auth = authorizer(acl(principal="User:*", name="*", host="*"))
    assert auth.authorize(BOB, "192.168.1.9", Op.READ, RT.TOPIC, "anything")
    assert not auth.authorize(BOB, HOST, Op.READ, RT.GROUP, "anything")  # another resource type
    by_host = authorizer(acl(host=HOST))
    assert by_host.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")
    assert not by_host.authorize(ALICE, "10.0.0.2", Op.READ, RT.TOPIC, "orders")
    assert not by_host.authorize(BOB, HOST, Op.READ, RT.TOPIC, "orders")
    # a wildcard-principal deny denies everyone, a host deny only that host
    assert not authorizer(acl(), acl(principal="User:*", perm=Perm.DENY)).authorize(
        ALICE, HOST, Op.READ, RT.TOPIC, "orders")
    denied_host = authorizer(acl(), acl(host="10.6.6.6", perm=Perm.DENY))
    assert denied_host.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")
    assert not denied_host.authorize(ALICE, "10.6.6.6", Op.READ, RT.TOPIC, "orders")


def test_a_literal_acl_named_star_is_only_the_wildcard_when_literal():
    auth = authorizer(acl(name="ord*"))
    assert not auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")
    assert auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "ord*")


names = st.text(alphabet="abo._-*", min_size=1, max_size=8)


@given(prefix=names, name=names)
def test_a_prefixed_allow_allows_exactly_the_names_it_starts(prefix, name):
    if prefix == "*":
        prefix = "**"
    auth = authorizer(acl(name=prefix, pattern=PT.PREFIXED))
    assert auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, name) == name.startswith(prefix)


@given(prefixes=st.lists(names, max_size=6), name=names)
def test_matching_acls_are_the_literal_wildcard_and_prefixes_of_the_name(prefixes, name):
    prefixes = [p if p != "*" else "**" for p in prefixes]
    bindings = [acl(name=p, pattern=PT.PREFIXED) for p in prefixes] + [acl(name=name), acl(name="*"),
                                                                      acl(name=name + "x")]
    auth = authorizer(*bindings)
    expected = {b for b in bindings if (b.pattern.pattern_type == PT.PREFIXED and name.startswith(b.pattern.name))
                or b.pattern.name in (name, "*")}
    assert set(auth.matching_acls(RT.TOPIC, name)) == expected
    # and removing some keeps the index right
    auth.remove(AclBindingFilter(pattern_type=PT.PREFIXED))
    assert set(auth.matching_acls(RT.TOPIC, name)) == {b for b in expected if b.pattern.pattern_type == PT.LITERAL}


def test_super_users_are_always_allowed_even_against_a_deny():
    auth = authorizer(acl(principal="User:root", op=Op.ALL, perm=Perm.DENY, name="*"), super_users={"User:root"})
    assert auth.authorize("User:root", HOST, Op.ALTER, RT.TOPIC, "orders")
    assert auth.authorize("User:root", HOST, Op.CLUSTER_ACTION, RT.CLUSTER, CLUSTER_NAME)
    assert not auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")


@pytest.mark.parametrize("allow_everyone", [True, False])
def test_no_acl_found_decides_by_allow_everyone(allow_everyone):
    auth = authorizer(acl(name="other"), allow_everyone=allow_everyone)
    assert auth.authorize(ALICE, HOST, Op.WRITE, RT.TOPIC, "orders") is allow_everyone
    assert auth.authorize(BOB, HOST, Op.READ, RT.GROUP, "g") is allow_everyone


def test_an_acl_for_another_principal_means_acls_were_found():
    """With allow.everyone.if.no.acl.found, an ACL naming bob on the topic still closes it to alice."""
    auth = authorizer(acl(principal=BOB), allow_everyone=True)
    assert auth.authorize(BOB, HOST, Op.READ, RT.TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")
    # also for another operation than the one the ACL names, and through a prefix
    assert not auth.authorize(BOB, HOST, Op.WRITE, RT.TOPIC, "orders")
    prefixed = authorizer(acl(principal=BOB, name="ord", pattern=PT.PREFIXED), allow_everyone=True)
    assert not prefixed.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "orders")
    assert prefixed.authorize(ALICE, HOST, Op.READ, RT.TOPIC, "payments")


def test_authorize_refuses_filter_values_as_actions():
    with pytest.raises(ValueError, match="one operation"):
        authorizer().authorize(ALICE, HOST, Op.ANY, RT.TOPIC, "orders")
    with pytest.raises(ValueError, match="one resource type"):
        authorizer().authorize(ALICE, HOST, Op.READ, RT.ANY, "orders")


# -- authorize_by_resource_type ----------------------------------------------------------------


def by_type(*bindings, op=Op.WRITE, principal=ALICE, **kwargs) -> bool:
    return authorizer(*bindings, **kwargs).authorize_by_resource_type(principal, HOST, op, RT.TOPIC)


def test_by_resource_type_cases():
    # no ACL at all for the type: allow.everyone decides, super users always pass
    assert not by_type()
    assert by_type(allow_everyone=True)
    assert by_type(acl(principal="User:root", name="*", op=Op.ALL, perm=Perm.DENY), principal="User:root",
                   super_users={"User:root"})
    # one literal or prefixed allow on some topic is enough
    assert by_type(acl(op=Op.WRITE))
    assert by_type(acl(op=Op.ALL, name="ord", pattern=PT.PREFIXED))
    assert by_type(acl(op=Op.WRITE, principal="User:*"))
    # ... for that principal, host and operation (implied operations do not count here)
    assert not by_type(acl(op=Op.WRITE, principal=BOB))
    assert not by_type(acl(op=Op.WRITE, host="10.9.9.9"))
    assert not by_type(acl(op=Op.READ))
    assert not by_type(acl(op=Op.WRITE), op=Op.DESCRIBE)
    # wildcard allow
    assert by_type(acl(op=Op.WRITE, name="*"), acl(op=Op.WRITE, name="orders", perm=Perm.DENY))
    # a wildcard deny blocks everything
    assert not by_type(acl(op=Op.WRITE), acl(op=Op.WRITE, name="*", perm=Perm.DENY))
    assert not by_type(acl(op=Op.WRITE, name="*"), acl(op=Op.ALL, name="*", perm=Perm.DENY, principal="User:*"))
    # a literal allow denied by the same literal name, or by a prefix of it
    assert not by_type(acl(op=Op.WRITE), acl(op=Op.WRITE, perm=Perm.DENY))
    assert not by_type(acl(op=Op.WRITE), acl(op=Op.WRITE, name="or", pattern=PT.PREFIXED, perm=Perm.DENY))
    assert not by_type(acl(op=Op.WRITE, name="orders", pattern=PT.PREFIXED),
                       acl(op=Op.WRITE, name="orders", pattern=PT.PREFIXED, perm=Perm.DENY))
    # a literal deny does not block a prefixed allow; a deny on a longer prefix does not either
    assert by_type(acl(op=Op.WRITE, name="orders", pattern=PT.PREFIXED), acl(op=Op.WRITE, perm=Perm.DENY))
    assert by_type(acl(op=Op.WRITE, name="ord", pattern=PT.PREFIXED),
                   acl(op=Op.WRITE, name="orders", pattern=PT.PREFIXED, perm=Perm.DENY))
    # one allow left undominated is enough
    assert by_type(acl(op=Op.WRITE), acl(op=Op.WRITE, name="payments"), acl(op=Op.WRITE, perm=Perm.DENY))
    # another resource type's ACLs do not count
    assert not by_type(acl(op=Op.WRITE, rtype=RT.GROUP))


def test_by_resource_type_refuses_filter_values():
    with pytest.raises(ValueError):
        authorizer().authorize_by_resource_type(ALICE, HOST, Op.ANY, RT.TOPIC)
    with pytest.raises(ValueError):
        authorizer().authorize_by_resource_type(ALICE, HOST, Op.WRITE, RT.UNKNOWN)


# -- filters -----------------------------------------------------------------------------------

ALL_KINDS = [
    acl(name="orders"), acl(name="*"), acl(name="ord", pattern=PT.PREFIXED), acl(name="orders", pattern=PT.PREFIXED),
    acl(name="pay", pattern=PT.PREFIXED), acl(name="orders", principal=BOB, op=Op.WRITE, perm=Perm.DENY),
    acl(name="orders", rtype=RT.GROUP), acl(name="payments", host=HOST),
]


def test_filter_any_matches_everything_and_describe_keeps_order():
    auth = authorizer(*ALL_KINDS)
    assert auth.bindings(AclBindingFilter()) == ALL_KINDS
    assert auth.bindings() == ALL_KINDS


def test_filter_by_each_field():
    auth = authorizer(*ALL_KINDS)
    assert auth.bindings(AclBindingFilter(resource_type=RT.GROUP)) == [ALL_KINDS[6]]
    assert auth.bindings(AclBindingFilter(principal=BOB)) == [ALL_KINDS[5]]
    assert auth.bindings(AclBindingFilter(host=HOST)) == [ALL_KINDS[7]]
    assert auth.bindings(AclBindingFilter(operation=Op.WRITE)) == [ALL_KINDS[5]]
    assert auth.bindings(AclBindingFilter(permission_type=Perm.DENY)) == [ALL_KINDS[5]]
    assert auth.bindings(AclBindingFilter(pattern_type=PT.PREFIXED)) == ALL_KINDS[2:5]


def test_filter_any_pattern_type_compares_names_exactly():
    auth = authorizer(*ALL_KINDS)
    got = auth.bindings(AclBindingFilter(RT.TOPIC, "orders", PT.ANY))
    assert got == [ALL_KINDS[0], ALL_KINDS[3], ALL_KINDS[5]]
    assert auth.bindings(AclBindingFilter(RT.TOPIC, "orders", PT.LITERAL)) == [ALL_KINDS[0], ALL_KINDS[5]]


def test_filter_match_selects_what_applies_to_the_resource():
    auth = authorizer(*ALL_KINDS)
    got = auth.bindings(AclBindingFilter(RT.TOPIC, "orders", PT.MATCH))
    assert got == [ALL_KINDS[0], ALL_KINDS[1], ALL_KINDS[2], ALL_KINDS[3], ALL_KINDS[5]]
    assert auth.bindings(AclBindingFilter(RT.ANY, "orders", PT.MATCH)) == got + [ALL_KINDS[6]]


def test_exact_filter_removes_one_binding_and_remove_returns_them():
    auth = authorizer(*ALL_KINDS)
    assert auth.remove(AclBindingFilter.exact(ALL_KINDS[3])) == [ALL_KINDS[3]]
    assert ALL_KINDS[3] not in auth.bindings()
    assert auth.remove(AclBindingFilter.exact(ALL_KINDS[3])) == []
    assert auth.remove(AclBindingFilter(resource_type=RT.TOPIC)) == [b for b in ALL_KINDS if b not in
                                                                     (ALL_KINDS[3], ALL_KINDS[6])]
    assert auth.bindings() == [ALL_KINDS[6]]
    # the indexes followed: nothing left applies to the topic
    assert auth.matching_acls(RT.TOPIC, "orders") == []


def test_filters_with_unknown_fields_are_refused():
    with pytest.raises(InvalidAclError, match="UNKNOWN"):
        authorizer().bindings(AclBindingFilter(operation=Op.UNKNOWN))
    with pytest.raises(InvalidAclError, match="UNKNOWN"):
        authorizer().remove(AclBindingFilter(resource_type=RT.UNKNOWN))
