#!/usr/bin/env python3
"""Creates, on a moto server started with INITIAL_NO_AUTH_ACTION_COUNT=4, an IAM user with full
access and its access key (the unauthenticated requests), then the buckets named on the command
line (signed with that key). Prints {"access_key": ..., "secret_key": ...}.

Usage: moto-setup.py ENDPOINT BUCKET...
"""
import json
import sys

import boto3

endpoint, buckets = sys.argv[1], sys.argv[2:]
anonymous = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
iam = boto3.client("iam", **anonymous)
iam.create_user(UserName="pipelinectl")
iam.put_user_policy(UserName="pipelinectl", PolicyName="all", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
key = iam.create_access_key(UserName="pipelinectl")["AccessKey"]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
for bucket in buckets:
    s3.create_bucket(Bucket=bucket)
print(json.dumps({"access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"]}))
