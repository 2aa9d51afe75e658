"""The local AWS world: the moto emulator plus what it lacks and what it does not refuse.

moto answers most of the calls joiner makes, but it is more lenient than AWS (IAM is not
enforced unless asked, and then only crudely) and it lacks some EKS APIs. Each module here
patches one such gap *inside* the moto process, before its server starts, so that every
client (the provider, the agent, kube-sim, the tests) sees one emulator on one endpoint with
the wire shapes of the real service:

- `identity`: the default credentials (`testing`) are a real IAM user with admin rights.
- `eks_access`: EKS access configuration and access entries (moto 5.2.5 answers 404).
- `eks_addons`: EKS add-ons (moto 5.2.5 answers 404), which kube-sim turns into Deployments.
- `eks_versions`: EKS's Kubernetes version calendar (DescribeClusterVersions, statuses from
  the dates against today); CreateCluster and UpdateClusterVersion refuse a version EKS does
  not offer, and a cluster created without one gets EKS's default (moto takes any version).
- `eks_network`: the cluster security group EKS creates (its name, tags and self rule), and
  the VPC configuration DescribeCluster reports (`clusterSecurityGroupId`, `vpcId`, the
  endpoint-access defaults); kube-sim decides from them whether a node reaches the API.
- `eks_token`: EKS bearer tokens verified (botocore's SigV4) and mapped through access
  entries, served as a TokenReview webhook; EKS clusters bound to local API servers.
- `instance_profiles`: instances launched from a launch template (CreateFleet, RunInstances)
  carry the template's IAM instance profile, so a node's role can be known.
- `fleet_groups`: instances an EC2 Fleet launches are in its launch template's security
  groups (moto 5.2.5 reads a key templates do not have, and drops them).
- `template_instances`: instances an EC2 Fleet launches from a launch template carry its
  `aws:ec2launchtemplate:id` and `:version` tags and its EBS volumes (moto 5.2.5 gives
  fleet instances neither), from which the kubelet bridge sizes a node's disk.
- `capacity_reservations`: EC2 capacity reservations (ODCRs, capacity blocks, interruptible
  ones; moto 5.2.5 has none), and CreateFleet launches into them with EC2's refusals.
- `launch_template_quota`: EC2's per-Region quota on launch templates (5,000 by default;
  a test sets an account's own), which CreateLaunchTemplate refuses past.
- `instance_metadata`: the account's instance-metadata defaults (moto 5.2.5 has none), and
  the launch EC2 refuses when an instance's tags are in IMDS and a tag key has a `/` or space.
- `event_envelope`: EventBridge delivers every event with its `account` (moto 5.2.5's SQS
  targets received events without it).
- `spot_prices`: the Spot price history as EC2 serves it, from a stated model (moto 5.2.5
  answers a constant 0.00001 everywhere): a price for each Spot market, and no entry where
  there is none (types not sold as Spot, and a documented zonal hole).
- `public_parameters`: the public SSM parameters of EKS node images (`/aws/service/eks/...`,
  `/aws/service/bottlerocket/...`), pointing at images that exist in moto.
- `pricing`: the Price List Query API's GetProducts (moto 5.2.5 has no pricing service): EC2
  on-demand Linux prices from the agent's tables, filters, pagination and the API's refusals,
  served only for the Regions that have its endpoint; a test changes a price through
  `/moto-api/joiner-local/pricing/<region>`.
- `oidc_keys`: OIDC issuers' signing keys (kube-sim's service-account issuer publishes its
  JWKS here), with which web-identity tokens are verified.
- `ebs_keys`: EBS encryption by default (moto 5.2.5 ignores it), and the launch that fails
  after answering (`Client.InternalError`) when a volume's customer managed KMS key is one
  the caller may not use through EC2 (asked of `iam_enforce`) or does not exist.
- `iam_enforce`: IAM authorization with IAM's rules, when `JOINER_LOCAL_IAM=enforce`.

Run as `python -m joiner_local -H 127.0.0.1 -p PORT` with this folder on PYTHONPATH
(`joiner_test_support::moto_command` does that); the arguments are moto_server's.
"""

# The extension modules, imported (and so applied) in this order by __main__.
EXTENSIONS = ["identity", "eks_access", "eks_addons", "eks_versions", "eks_network", "eks_token", "instance_profiles", "fleet_groups", "template_instances", "capacity_reservations", "launch_template_quota", "instance_metadata", "event_envelope", "spot_prices", "public_parameters", "oidc_keys", "ebs_keys", "pricing", "iam_enforce"]
